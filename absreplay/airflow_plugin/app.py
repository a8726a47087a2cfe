"""The view's FastAPI app: pages and JSON of every job's checkpoints, read from the catalog.

Pages: ``/`` (the jobs), ``/jobs/{job}`` (charts and the paged checkpoint
history, filter by status), ``/jobs/{job}/checkpoints/{id}`` (acks, sink
transactions, dead letters, back-edge log, recoveries). ``/api/...`` returns
the same as JSON. Every request runs as the Airflow user of its token or
cookie; what they may see and do is asked of the auth manager
(``access``).

Recover and rewind: ``/jobs/{job}/checkpoints/{id}/recover[?rewind=true]`` says
what the recovery would change and asks to confirm; the confirmation posts to
``/api/jobs/{job}/recoveries``, which starts a run of the recover DAG unless one
of the job is under way (409), and the page follows the run through
``/api/jobs/{job}/runs/{run_id}`` (``recovery_runs``).

The history's filter and pager links carry only what they set: no ``status=`` for all
checkpoints, no ``page=1`` (an empty ``status`` still means all, as an old link or a form
sends it). A page asked for while signed out goes to Airflow's login page, which comes back to
it (``next=``); ``/api/...`` answers 401.

A bad URL is the user's mistake, never a 500: numbers in it are bounded as on
the command line (``coordinator.arguments``), so none reaches the database out of
its BIGINT range; a page past the last is a 404 that links to the last one.
Errors of the pages are pages in the view's layout (``error.html``), errors of
``/api/...`` FastAPI's JSON.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi import Path as InPath
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import ChoiceLoader, Environment, FileSystemLoader, select_autoescape
from pydantic import BeforeValidator
from sqlalchemy import Engine
from starlette.exceptions import HTTPException as StarletteHTTPException

from absreplay.airflow_plugin.recovery_runs import (
    AirflowRuns, RecoveryUnderWay, airflow_runs, follow, preview, start as start_recovery,
)
from absreplay.airflow_plugin.recovery_runs import conf as recovery_conf
from absreplay.airflow_plugin.access import AuthManager, JobAccess, User, auth_manager, job_access, readable
from absreplay.airflow_plugin.catalog import catalog_engine
from absreplay.commands.charts import job_charts
from coordinator.arguments import BIGINT_MAX, out_of_range
from absreplay.commands.views import format_bytes, format_duration, format_time
from coordinator.catalog import audit
from coordinator.checkpoints import weak as weak_consistency
from coordinator.checkpoints.lifecycle import CheckpointStatus
from coordinator.errors import CheckpointNotFoundError, UsageError

URL_PREFIX = "/absreplay"
PAGE_SIZE = 25
HERE = Path(__file__).parent

app = FastAPI(title="ABS Replay", docs_url=None, redoc_url=None, openapi_url=None)
templates = Environment(
    loader=ChoiceLoader([FileSystemLoader(HERE / "templates"), FileSystemLoader(HERE.parent / "templates")]),
    autoescape=select_autoescape(["html"]),
)
templates.filters["bytes"] = format_bytes
templates.filters["duration"] = format_duration
templates.filters["utc"] = format_time
templates.filters["percent"] = audit.percent
templates.filters["tojson_attr"] = lambda v: json.dumps(v, sort_keys=True)
Catalog = Annotated[Engine, Depends(catalog_engine)]
Runs = Annotated[AirflowRuns, Depends(airflow_runs)]

#: every number a URL may carry, and its range: ids and offsets are the catalog's BIGINTs
RANGES = {"checkpoint_id": (1, BIGINT_MAX), "page": (1, BIGINT_MAX), "offset": (0, BIGINT_MAX), "limit": (1, 500)}
#: the heading of an error page, by status
ERROR_TITLES = {401: "Not signed in", 403: "Not allowed", 404: "Not found", 409: "Refused", 422: "Bad request"}


def _number(name: str, where: Any = Query) -> Any:
    low, high = RANGES[name]
    return Annotated[int, where(ge=low, le=high)]


#: a status filter; empty (the "all" of the form, an old link's ``status=``) is no filter
StatusFilter = Annotated[CheckpointStatus | None, BeforeValidator(lambda v: v or None)]
CheckpointId = _number("checkpoint_id", InPath)
PageNo = _number("page")
Offset = _number("offset")
Limit = _number("limit")


class ViewError(HTTPException):
    """An HTTP error of the view that says where to go instead: ``link`` is (label, path under the view)."""

    def __init__(self, status_code: int, detail: str, link: tuple[str, str] | None = None) -> None:
        super().__init__(status_code, detail)
        self.link = link


def actions(access: JobAccess, status: str, checkpoint_id: int, weak: bool = False) -> list[dict[str, Any]]:
    """The recover DAG runs a user may start from this checkpoint (a COMPLETED one, with trigger rights;
    none for a weak-consistency job, which has no consistent checkpoint to go back to)."""
    if weak or not access.can_trigger or status != CheckpointStatus.COMPLETED:
        return []
    confirm = f"{_job_link(access.job)[1]}/checkpoints/{checkpoint_id}/recover"
    return [
        {"label": "Recover to this checkpoint", "dag_id": access.dag_id,
         "conf": recovery_conf(checkpoint_id, False), "href": confirm},
        {"label": "Rewind to here", "dag_id": access.dag_id,
         "conf": recovery_conf(checkpoint_id, True), "href": f"{confirm}?rewind=true"},
    ]


def _job_link(job: str) -> tuple[str, str]:
    return f"the checkpoints of {job}", f"/jobs/{quote(job, safe='')}"


def listing_query(status: str | None, page: int = 1) -> str:
    """The query of a page of the history: only what it sets (no empty status, no page 1)."""
    query = urlencode({k: v for k, v in (("status", status or ""), ("page", page if page > 1 else "")) if v})
    return f"?{query}" if query else ""


def _known_job(engine: Engine, job: str) -> None:
    if job not in audit.job_names(engine):
        raise ViewError(404, f"no job {job!r} in the catalog", ("every job", "/"))


def _page(engine: Engine, access: JobAccess, status: CheckpointStatus | None, offset: int,
          limit: int) -> dict[str, Any]:
    page = audit.checkpoint_page(engine, access.job, status, offset, limit)
    weak = audit.is_weak(engine, access.job)
    dead = audit.epoch_dead_letters(engine, access.job, [r.checkpoint_id for r in page.rows])
    return {**asdict(page), "can_trigger": access.can_trigger, "weak": weak, "rows": [
        {**asdict(r), "dead_letters": dead[r.checkpoint_id],
         "actions": actions(access, r.status, r.checkpoint_id, weak)} for r in page.rows]}


def _html(request: Request, name: str, status_code: int = 200, headers: dict[str, str] | None = None,
          **context: Any) -> HTMLResponse:
    from airflow.api_fastapi.app import API_ROOT_PATH

    return HTMLResponse(templates.get_template(name).render(
        prefix=request.scope.get("root_path", URL_PREFIX), airflow_root=API_ROOT_PATH.rstrip("/"), **context),
        status_code=status_code, headers=headers)


# -- errors --------------------------------------------------------------------------------------
def _is_api(request: Request) -> bool:
    root, path = request.scope.get("root_path", ""), request.scope["path"]
    return (path[len(root):] if root and path.startswith(root) else path).startswith("/api/")


def _problem(error: dict[str, Any]) -> str:
    """One validation error of a URL as a sentence: which parameter, the value given, what it may be."""
    name = str(error["loc"][-1]) if error.get("loc") else "the URL"
    label, given = name.replace("_", " "), error.get("input")
    if name in RANGES:
        return f"{label} {out_of_range(given, *RANGES[name])}"
    msg = str(error.get("msg") or "is not valid")
    return f"{label} {str(given)!r}: {msg[:1].lower()}{msg[1:]}"


def _error_page(request: Request, status_code: int, message: str, link: tuple[str, str] | None,
                headers: dict[str, str] | None = None) -> HTMLResponse:
    return _html(request, "error.html", status_code=status_code, headers=headers, message=message, link=link,
                 title=ERROR_TITLES.get(status_code, HTTPStatus(status_code).phrase))


@app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    if _is_api(request):
        return await http_exception_handler(request, exc)
    if exc.status_code == 401 and request.method == "GET":
        return RedirectResponse(_login_url(request), status_code=303)
    message = str(exc.detail)
    if message == HTTPStatus(exc.status_code).phrase:  # the router's own 404 / 405: say what was asked
        message = f"the ABS Replay view has no page {request.scope['path']!r} (for a {request.method} request)"
    return _error_page(request, exc.status_code, message, getattr(exc, "link", None), exc.headers)


def _login_url(request: Request) -> str:
    """Airflow's login page, which sends the user back to ``request``'s page once signed in."""
    manager = app.dependency_overrides.get(auth_manager, auth_manager)()
    return manager.get_url_login(next_url=str(request.url))


@app.exception_handler(RequestValidationError)
async def _bad_url(request: Request, exc: RequestValidationError) -> Response:
    if _is_api(request):
        return await request_validation_exception_handler(request, exc)
    job = request.path_params.get("job")
    link = _job_link(job) if job else ("every job", "/")
    return _error_page(request, 422, "; ".join(_problem(e) for e in exc.errors()), link)


# -- JSON ----------------------------------------------------------------------------------------
@app.get("/api/jobs")
def api_jobs(user: User, manager: AuthManager, engine: Catalog) -> list[dict[str, Any]]:
    return [asdict(a) for a in (job_access(manager, user, j) for j in audit.job_names(engine)) if a.can_read]


@app.get("/api/jobs/{job}/checkpoints")
def api_checkpoints(job: str, user: User, manager: AuthManager, engine: Catalog,
                    status: StatusFilter = None, offset: Offset = 0, limit: Limit = PAGE_SIZE) -> Any:
    access = readable(manager, user, job)
    _known_job(engine, job)
    return jsonable_encoder(_page(engine, access, status, offset, limit))


@app.get("/api/jobs/{job}/timeline")
def api_timeline(job: str, user: User, manager: AuthManager, engine: Catalog) -> Any:
    readable(manager, user, job)
    _known_job(engine, job)
    return jsonable_encoder([asdict(p) for p in audit.timeline(engine, job)])


def _detail(engine: Engine, job: str, checkpoint_id: int) -> audit.CheckpointDetail:
    _known_job(engine, job)
    try:
        return audit.checkpoint_detail(engine, job, checkpoint_id)
    except CheckpointNotFoundError as exc:
        raise ViewError(404, str(exc), _job_link(job)) from None


@app.get("/api/jobs/{job}/checkpoints/{checkpoint_id}")
def api_checkpoint(job: str, checkpoint_id: CheckpointId, user: User, manager: AuthManager, engine: Catalog) -> Any:
    access = readable(manager, user, job)
    detail = _detail(engine, job, checkpoint_id)
    weak = audit.is_weak(engine, job)
    # a dead letter's exact bytes (``payload_bytes``) need not be UTF-8: base64, as bytes go in JSON
    return jsonable_encoder({**asdict(detail), "can_trigger": access.can_trigger, "weak": weak,
                             "actions": actions(access, detail.summary.status, checkpoint_id, weak)},
                            custom_encoder={bytes: lambda b: base64.b64encode(b).decode("ascii")})


# -- pages ---------------------------------------------------------------------------------------
@app.get("/", response_class=HTMLResponse)
def index(request: Request, user: User, manager: AuthManager, engine: Catalog) -> HTMLResponse:
    jobs = [a for a in (job_access(manager, user, j) for j in audit.job_names(engine)) if a.can_read]
    return _html(request, "index.html", jobs=jobs)


@app.get("/jobs/{job}", response_class=HTMLResponse)
def job_page(request: Request, job: str, user: User, manager: AuthManager, engine: Catalog,
             status: StatusFilter = None, page: PageNo = 1) -> HTMLResponse:
    access = readable(manager, user, job)
    _known_job(engine, job)
    # a page past the last reads no row (and is refused below): the offset stays a BIGINT
    checkpoints = _page(engine, access, status, min((page - 1) * PAGE_SIZE, BIGINT_MAX), PAGE_SIZE)
    pages = max(1, -(-checkpoints["total"] // PAGE_SIZE))
    if page > pages:
        _past_the_last(job, status, checkpoints["total"], page, pages)
    return _html(request, "job.html", job=job, access=access, page=checkpoints, page_no=page, pages=pages,
                 weak_label=weak_consistency.LABEL if checkpoints["weak"] else "",
                 status=status.value if status else "", statuses=[s.value for s in CheckpointStatus],
                 listing_query=listing_query,
                 charts=job_charts(audit.timeline(engine, job)))


def _past_the_last(job: str, status: CheckpointStatus | None, total: int, page: int, pages: int) -> None:
    """404 for a page past the last (bookmarked before retention or a filter shrank the list), with a link to
    the last page; never "page 99 of 1"."""
    which = f"{status.value} " if status else ""
    raise ViewError(404, f"there is no page {page} of the {which}checkpoints of {job}: {total} checkpoint(s) "
                         f"fill {pages} page(s) of {PAGE_SIZE}",
                    (f"the last page ({pages})", f"{_job_link(job)[1]}{listing_query(status, pages)}"))


@app.get("/jobs/{job}/checkpoints/{checkpoint_id}", response_class=HTMLResponse)
def checkpoint_page(request: Request, job: str, checkpoint_id: CheckpointId, user: User, manager: AuthManager,
                    engine: Catalog) -> HTMLResponse:
    access = readable(manager, user, job)
    detail = _detail(engine, job, checkpoint_id)
    is_weak = audit.is_weak(engine, job)
    return _html(request, "checkpoint.html", job=job, access=access, d=detail,
                 weak_label=weak_consistency.LABEL if is_weak else "",
                 actions=actions(access, detail.summary.status, checkpoint_id, is_weak))


@app.get("/jobs/{job}/checkpoints/{checkpoint_id}/recover", response_class=HTMLResponse)
def confirm_page(request: Request, job: str, checkpoint_id: CheckpointId, user: User, manager: AuthManager,
                 engine: Catalog, rewind: bool = False) -> HTMLResponse:
    """What recovering (or rewinding) to the checkpoint would change, and the button that starts it."""
    access = _triggerable(manager, user, job)
    detail = _detail(engine, job, checkpoint_id)
    if not actions(access, detail.summary.status, checkpoint_id, audit.is_weak(engine, job)):
        raise ViewError(409, f"checkpoint {checkpoint_id} of {job} is {detail.summary.status}: only a COMPLETED "
                             f"checkpoint of a job with consistent checkpoints can be restored",
                        (f"checkpoint {checkpoint_id}", f"{_job_link(job)[1]}/checkpoints/{checkpoint_id}"))
    try:
        plan = preview(engine, job, checkpoint_id, rewind)
    except (CheckpointNotFoundError, UsageError) as exc:
        raise ViewError(409, str(exc), _job_link(job)) from None
    return _html(request, "confirm.html", job=job, access=access, plan=plan, checkpoint_id=checkpoint_id,
                 rewind=rewind, conf=recovery_conf(checkpoint_id, rewind))


def _triggerable(manager: Any, user: Any, job: str) -> JobAccess:
    access = readable(manager, user, job)
    if not access.can_trigger:
        raise HTTPException(403, f"you may not trigger the DAG {access.dag_id}, so not recover {job!r}")
    return access


@app.post("/api/jobs/{job}/recoveries")
def api_start_recovery(job: str, body: dict[str, Any], user: User, manager: AuthManager, engine: Catalog,
                       runs: Runs) -> Any:
    """Start a run of the job's recover DAG (body: ``checkpoint``, ``rewind``); 409 while one is under way."""
    access = _triggerable(manager, user, job)
    _known_job(engine, job)
    checkpoint, rewind = body.get("checkpoint"), body.get("rewind", False)
    if isinstance(checkpoint, bool) or not isinstance(checkpoint, int) or not 1 <= checkpoint <= BIGINT_MAX:
        raise HTTPException(422, f"checkpoint must be a whole number from 1 to {BIGINT_MAX}, not {checkpoint!r}")
    if not isinstance(rewind, bool):
        raise HTTPException(422, f"rewind must be true or false, not {rewind!r}")
    try:
        run = start_recovery(engine, runs, job, access.dag_id, checkpoint, rewind, user.get_name())
    except RecoveryUnderWay as exc:
        raise HTTPException(409, {"message": str(exc), "dag_run_id": exc.dag_run_id}) from None
    return {**asdict(run), "dag_id": access.dag_id}


@app.get("/api/jobs/{job}/runs/{dag_run_id}")
def api_recovery_run(job: str, dag_run_id: str, user: User, manager: AuthManager, engine: Catalog,
                     runs: Runs) -> Any:
    """A run of the job's recover DAG: its state, whether the DAG is paused, the recoveries row it left."""
    access = readable(manager, user, job)
    _known_job(engine, job)
    followed = follow(engine, runs, job, access.dag_id, dag_run_id)
    if followed is None:
        raise HTTPException(404, f"no run {dag_run_id!r} of {access.dag_id}")
    return jsonable_encoder(followed)
