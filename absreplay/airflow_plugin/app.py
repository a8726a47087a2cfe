"""The view's FastAPI app: pages and JSON of every job's checkpoints, read from the catalog.

Pages: ``/`` (the jobs), ``/jobs/{job}`` (charts and the paged checkpoint
history, filter by status), ``/jobs/{job}/checkpoints/{id}`` (acks, sink
transactions, dead letters, back-edge log, recoveries). ``/api/...`` returns
the same as JSON. Every request runs as the Airflow user of its token or
cookie; what they may see and do is asked of the auth manager
(``access``). The recover buttons post to Airflow's own REST API from the
browser, as that user.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse
from jinja2 import ChoiceLoader, Environment, FileSystemLoader, select_autoescape
from sqlalchemy import Engine

from absreplay.airflow_plugin.access import AuthManager, JobAccess, User, job_access, readable
from absreplay.airflow_plugin.catalog import catalog_engine
from absreplay.charts import job_charts
from absreplay.views import format_bytes
from coordinator.catalog import audit
from coordinator.checkpoints import weak as weak_consistency
from coordinator.checkpoints.lifecycle import CheckpointStatus
from coordinator.errors import CheckpointNotFoundError

URL_PREFIX = "/absreplay"
PAGE_SIZE = 25
HERE = Path(__file__).parent

app = FastAPI(title="ABS Replay", docs_url=None, redoc_url=None, openapi_url=None)
templates = Environment(
    loader=ChoiceLoader([FileSystemLoader(HERE / "templates"), FileSystemLoader(HERE.parent / "templates")]),
    autoescape=select_autoescape(["html"]),
)
templates.filters["bytes"] = format_bytes
templates.filters["percent"] = audit.percent
templates.filters["tojson_attr"] = lambda v: json.dumps(v, sort_keys=True)
Catalog = Annotated[Engine, Depends(catalog_engine)]


def actions(access: JobAccess, status: str, checkpoint_id: int, weak: bool = False) -> list[dict[str, Any]]:
    """The recover DAG runs a user may start from this checkpoint (a COMPLETED one, with trigger rights;
    none for a weak-consistency job, which has no consistent checkpoint to go back to)."""
    if weak or not access.can_trigger or status != CheckpointStatus.COMPLETED:
        return []
    return [
        {"label": "Recover to this checkpoint", "dag_id": access.dag_id,
         "conf": {"checkpoint": checkpoint_id, "mode": "full", "rewind": False}},
        {"label": "Rewind to here", "dag_id": access.dag_id,
         "conf": {"checkpoint": checkpoint_id, "mode": "full", "rewind": True}},
    ]


def _known_job(engine: Engine, job: str) -> None:
    if job not in audit.job_names(engine):
        raise HTTPException(404, f"no job {job!r} in the catalog")


def _page(engine: Engine, access: JobAccess, status: CheckpointStatus | None, offset: int,
          limit: int) -> dict[str, Any]:
    page = audit.checkpoint_page(engine, access.job, status, offset, limit)
    weak = audit.is_weak(engine, access.job)
    dead = audit.epoch_dead_letters(engine, access.job, [r.checkpoint_id for r in page.rows])
    return {**asdict(page), "can_trigger": access.can_trigger, "weak": weak, "rows": [
        {**asdict(r), "dead_letters": dead[r.checkpoint_id],
         "actions": actions(access, r.status, r.checkpoint_id, weak)} for r in page.rows]}


def _html(request: Request, name: str, **context: Any) -> HTMLResponse:
    from airflow.api_fastapi.app import API_ROOT_PATH

    return HTMLResponse(templates.get_template(name).render(
        prefix=request.scope.get("root_path", URL_PREFIX), airflow_root=API_ROOT_PATH.rstrip("/"), **context))


# -- JSON ----------------------------------------------------------------------------------------
@app.get("/api/jobs")
def api_jobs(user: User, manager: AuthManager, engine: Catalog) -> list[dict[str, Any]]:
    return [asdict(a) for a in (job_access(manager, user, j) for j in audit.job_names(engine)) if a.can_read]


@app.get("/api/jobs/{job}/checkpoints")
def api_checkpoints(job: str, user: User, manager: AuthManager, engine: Catalog,
                    status: CheckpointStatus | None = None, offset: Annotated[int, Query(ge=0)] = 0,
                    limit: Annotated[int, Query(ge=1, le=500)] = PAGE_SIZE) -> Any:
    access = readable(manager, user, job)
    _known_job(engine, job)
    return jsonable_encoder(_page(engine, access, status, offset, limit))


@app.get("/api/jobs/{job}/timeline")
def api_timeline(job: str, user: User, manager: AuthManager, engine: Catalog) -> Any:
    readable(manager, user, job)
    _known_job(engine, job)
    return jsonable_encoder([asdict(p) for p in audit.timeline(engine, job)])


def _detail(engine: Engine, job: str, checkpoint_id: int) -> audit.CheckpointDetail:
    try:
        return audit.checkpoint_detail(engine, job, checkpoint_id)
    except CheckpointNotFoundError as exc:
        raise HTTPException(404, str(exc)) from None


@app.get("/api/jobs/{job}/checkpoints/{checkpoint_id}")
def api_checkpoint(job: str, checkpoint_id: int, user: User, manager: AuthManager, engine: Catalog) -> Any:
    access = readable(manager, user, job)
    detail = _detail(engine, job, checkpoint_id)
    weak = audit.is_weak(engine, job)
    return jsonable_encoder({**asdict(detail), "can_trigger": access.can_trigger, "weak": weak,
                             "actions": actions(access, detail.summary.status, checkpoint_id, weak)})


# -- pages ---------------------------------------------------------------------------------------
@app.get("/", response_class=HTMLResponse)
def index(request: Request, user: User, manager: AuthManager, engine: Catalog) -> HTMLResponse:
    jobs = [a for a in (job_access(manager, user, j) for j in audit.job_names(engine)) if a.can_read]
    return _html(request, "index.html", jobs=jobs)


@app.get("/jobs/{job}", response_class=HTMLResponse)
def job_page(request: Request, job: str, user: User, manager: AuthManager, engine: Catalog,
             status: CheckpointStatus | None = None, page: Annotated[int, Query(ge=1)] = 1) -> HTMLResponse:
    access = readable(manager, user, job)
    _known_job(engine, job)
    checkpoints = _page(engine, access, status, (page - 1) * PAGE_SIZE, PAGE_SIZE)
    pages = max(1, -(-checkpoints["total"] // PAGE_SIZE))
    return _html(request, "job.html", job=job, access=access, page=checkpoints, page_no=page, pages=pages,
                 weak_label=weak_consistency.LABEL if checkpoints["weak"] else "",
                 status=status.value if status else "", statuses=[s.value for s in CheckpointStatus],
                 charts=job_charts(audit.timeline(engine, job)))


@app.get("/jobs/{job}/checkpoints/{checkpoint_id}", response_class=HTMLResponse)
def checkpoint_page(request: Request, job: str, checkpoint_id: int, user: User, manager: AuthManager,
                    engine: Catalog) -> HTMLResponse:
    access = readable(manager, user, job)
    detail = _detail(engine, job, checkpoint_id)
    is_weak = audit.is_weak(engine, job)
    return _html(request, "checkpoint.html", job=job, access=access, d=detail,
                 weak_label=weak_consistency.LABEL if is_weak else "",
                 actions=actions(access, detail.summary.status, checkpoint_id, is_weak))
