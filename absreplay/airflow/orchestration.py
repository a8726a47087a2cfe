"""What the Airflow DAGs of ABS Replay do; ``dags/`` holds only their wiring.

Every function here takes the ``Settings`` first and returns plain,
JSON-serializable values (they travel as XComs and asset-event extras).
``run_in_task`` is how a DAG task calls one of them: it resolves the settings
inside the running task and turns bad input into a failure that is not retried.

Which catalog the DAGs use: the Airflow Variable ``abs_database_url`` when it
is set, else ``ABS_DATABASE_URL`` and the rest of the environment exactly as
the command line reads it (``Settings.from_env``). The data dir and the state
root always come from the environment (``ABS_DATA_DIR``, ``ABS_STATE_URI``,
``ABS_HOME``). The catalog's password is registered with Airflow's secrets
masker, so it never shows in task logs or rendered templates.

Nothing here imports Airflow, pyspark or pyarrow at module level: the DAG
files import this module while they are parsed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypeVar

from coordinator.catalog.db import parse_url
from coordinator.errors import (
    AbsError,
    CatalogUnavailableError,
    DeadLetterShareError,
)
from coordinator.dataflow.discovery import discover, get_job
from absreplay.commands.context import DATABASE_URL_VARIABLE
from coordinator.modes import RecoveryMode, SnapshotMode
from coordinator.settings import Settings

if TYPE_CHECKING:
    from absreplay.commands.context import JobContext
    from coordinator.checkpoints.store import CheckpointStore

#: the epochs DAG's choices, the default first
SNAPSHOT_MODES = tuple(m.value for m in SnapshotMode)
RECOVERY_MODES = tuple(m.value for m in RecoveryMode)
# what the processing application's driver reads (process.py: Settings.from_env); ABS_PARALLELISM
# is empty unless the worker sets it (then the job runs at its own parallelism)
DRIVER_ENV = ("ABS_HOME", "ABS_DATABASE_URL", "ABS_DATA_DIR", "ABS_STATE_URI", "ABS_PARALLELISM", "ABS_JOBS_DIR",
              "ABS_STATE_BACKEND", "ABS_STORE_DIR")

T = TypeVar("T")


# -- settings ---------------------------------------------------------------------------
def resolve_settings(variable_url: str | None, env: Mapping[str, str] | None = None) -> Settings:
    """The Variable's catalog URL when it is set, else the environment's; everything else from the environment."""
    values = dict(os.environ if env is None else env)
    if variable_url:
        values["ABS_DATABASE_URL"] = variable_url
    return Settings.from_env(values)


def airflow_settings() -> Settings:
    """The settings of the running Airflow task (reads the Variable; masks the catalog password)."""
    from airflow.sdk import Variable
    from airflow.sdk.log import mask_secret

    settings = resolve_settings(Variable.get(DATABASE_URL_VARIABLE, default=None))
    password = parse_url(settings.database_url).password
    if password:
        mask_secret(password)
    return settings


def fails_without_retry(exc: BaseException) -> bool:
    """Bad input (exit code 2) cannot be fixed by retrying; an unreachable catalog may come back. A barrier
    of too many dead letters is registered already: a retry would inject the next one and turn green."""
    if isinstance(exc, DeadLetterShareError):
        return True
    return isinstance(exc, AbsError) and exc.exit_code == 2 and not isinstance(exc, CatalogUnavailableError)


@contextmanager
def task_errors() -> Iterator[None]:
    """Inside an Airflow task: bad input fails the task at once (AirflowFailException), anything else may retry."""
    from airflow.sdk.exceptions import AirflowFailException

    try:
        yield
    except AbsError as exc:
        if fails_without_retry(exc):
            raise AirflowFailException(str(exc)) from None
        raise


def run_in_task(fn: Callable[..., T], *args: Any) -> T:
    """Call ``fn(settings, *args)`` from an Airflow task."""
    with task_errors():
        return fn(airflow_settings(), *args)


@contextmanager
def _job(settings: Settings, job: str) -> Iterator[JobContext]:
    """The job's context (registers the job on first use); its connections are closed afterwards."""
    from absreplay.commands.context import job_context

    ctx = job_context(job, settings)
    try:
        yield ctx
    finally:
        ctx.store.engine.dispose()


@contextmanager
def catalog_store(settings: Settings) -> Iterator[CheckpointStore]:
    """A store on the migrated catalog, read or written without registering anything."""
    from absreplay.commands.context import open_store

    store = open_store(settings)
    try:
        yield store
    finally:
        store.engine.dispose()


# -- barriers and epochs ---------------------------------------------------------------------
def barrier_asset_name(job: str) -> str:
    return f"abs_{job}_barriers"


def barrier_asset_uri(job: str) -> str:
    return f"absreplay://{job}/barriers"


def barrier_asset(job: str):
    """The asset the barriers DAG emits and the epochs DAG is scheduled on: one definition for both."""
    from airflow.sdk import Asset

    return Asset(name=barrier_asset_name(job), uri=barrier_asset_uri(job), group="absreplay")


def inject_barrier(settings: Settings, job: str) -> dict[str, Any]:
    """Inject barrier n (never waits for processing); ``checkpoint_id`` is None when the policy skipped it.
    Its dead letters beyond the job's ``max_dead_letter_share`` fail the task (red, not retried), the
    barrier registered all the same."""
    from absreplay.commands.views import format_cut
    from coordinator.checkpoints.policy import TriggerDecision

    with _job(settings, job) as ctx:
        outcome = ctx.coordinator.inject()
        executed = outcome.decision is TriggerDecision.EXECUTE
        dead = ctx.coordinator.dead_letters(outcome.checkpoint_id) if executed else None  # None: skipped
        if dead is not None:
            ctx.coordinator.check_dead_letters(outcome.checkpoint_id, dead)
    if dead is not None:
        message = (f"{job}: barrier {outcome.checkpoint_id} injected; {outcome.new_segments} new segment(s), "
                   f"{outcome.new_records} new record(s); cut {format_cut(outcome.cut)}"
                   + (f"; {dead.describe()}" if dead.count else ""))
    else:
        message = f"{job}: barrier skipped ({outcome.decision}); the next barrier covers these records"
    return {
        "job": job,
        "decision": str(outcome.decision),
        "checkpoint_id": outcome.checkpoint_id,
        "new_segments": outcome.new_segments,
        "new_records": outcome.new_records,
        "dead_letters": dead.count if dead else 0,
        "dead_letter_share": dead.share if dead else 0.0,
        "cut": dict(outcome.cut),
        "message": message,
    }


def finalize_checkpoints(settings: Settings, job: str) -> dict[str, Any]:
    """Expire timed-out checkpoints, commit completed ones' sinks, abort failed ones', retain, collect garbage."""
    from absreplay.commands.views import finalize_line

    from coordinator.sinks import commits

    with _job(settings, job) as ctx:
        report = ctx.coordinator.finalize()
        with ctx.store.sessions() as s:
            sink_commits = commits.of_checkpoints(s, ctx.job, report.committed, settings.database_url)
    return {"job": job, **asdict(report), "sink_commits": [asdict(c) for c in sink_commits],
            "message": finalize_line(job, report)}


# -- sink commits, as the assets' events say them (``absreplay.airflow.sink_assets``) --------------------
def sink_commit_marks(settings: Settings, job: str) -> dict[str, int]:
    """Sink -> the newest checkpoint committed to it: read before a recovery (``sink_commits_after``)."""
    from coordinator.sinks import commits

    with catalog_store(settings) as store, store.sessions() as s:
        return commits.newest_committed(s, job)


def sink_commits_after(settings: Settings, job: str, marks: Mapping[str, int]) -> list[dict[str, Any]]:
    """What was committed to the job's sinks beyond ``marks``, per sink (as ``finalize_checkpoints`` says)."""
    from coordinator.sinks import commits

    definition = get_job(job)
    with catalog_store(settings) as store, store.sessions() as s:
        return [asdict(c) for c in commits.committed_after(s, definition, marks, settings.database_url)]


def weak_note(job) -> str:
    """The first lines of a weak-consistency job's DAG docs, saying what it is; empty for any other job."""
    if job.consistency != "weak":
        return ""
    from coordinator.checkpoints import weak

    return (f"**Job `{job.name}` is declared `consistency='weak'`: {weak.LABEL}.** It has no recover DAG, "
            f"and `sync` snapshots are refused.\n\n")


def process_args(job: str, snapshot_mode: str) -> list[str]:
    """The processing application's arguments (spark_jobs/process.py)."""
    get_job(job)
    return [job, "--snapshot-mode", snapshot_mode]


def driver_env(settings: Settings) -> dict[str, str]:
    """The settings the processing driver needs, as environment variables (spark-submit ``env_vars``)."""
    env = settings.as_env()
    return {key: env[key] for key in DRIVER_ENV}


def python_conf(python: str | None = None) -> dict[str, str]:
    """Driver and executors run this Python (the one with the project's dependencies installed)."""
    python = python or sys.executable
    return {"spark.pyspark.python": python, "spark.pyspark.driver.python": python}


def pyfiles_zip(settings: Settings) -> str:
    """The ``--py-files`` zip of ``coordinator`` and ``spark_jobs``, cached under ``$ABS_HOME/pyfiles``."""
    from absreplay.commands.pyfiles import build_pyfiles_zip

    return str(build_pyfiles_zip(settings.home / "pyfiles"))


def spark_submit_macros() -> dict[str, Callable[..., str]]:
    """Jinja macros that SparkSubmitOperator's templated fields call when the task renders (not at parse)."""
    return {
        "abs_setting": lambda key: driver_env(airflow_settings())[key],
        "abs_py_files": lambda: pyfiles_zip(airflow_settings()),
        "abs_python": lambda: sys.executable,
    }


# -- maintenance -----------------------------------------------------------------------------
def catalog_jobs(settings: Settings) -> list[str]:
    """Every job with a row in the catalog."""
    from coordinator.catalog import audit

    with catalog_store(settings) as store:
        return audit.job_names(store.engine)


def maintain_job(settings: Settings, job: str) -> dict[str, Any]:
    """Expire stale pending checkpoints; delete state files no catalog row references."""
    from coordinator.checkpoints.coordinator import CheckpointCoordinator
    from coordinator.checkpoints.lease import expire_unless_processing

    definition = discover().jobs.get(job)
    with catalog_store(settings) as store:
        expired = expire_unless_processing(store, job)
        if definition is None:
            # without its definition this deployment cannot tell the job's state layout apart: leave it alone
            return {"job": job, "expired": expired, "deleted_dirs": [],
                    "message": f"{job}: expired {expired or '-'}; not registered here, state files left alone"}
        deleted = CheckpointCoordinator(store, definition, settings.data_dir, settings.state_uri).collect_garbage()
    return {"job": job, "expired": expired, "deleted_dirs": deleted,
            "message": f"{job}: expired {expired or '-'}; deleted {len(deleted)} unreferenced state dir(s)"}
