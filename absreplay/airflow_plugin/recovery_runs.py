"""Recoveries started from the view: what one would change, starting it at most once, following its run.

``preview`` reads the catalog (``coordinator.checkpoints.recovery.preview``: the rule the recovery itself
applies). ``start`` triggers a run of ``abs_<job>_recover`` unless a recovery of the job is already
under way: a queued or running run of that DAG, or a RUNNING row in ``recoveries`` (one started from
the command line). The check and the trigger happen under the job's row lock in the catalog, so two
clicks (or two users) that arrive together start one run. ``follow`` is the run's state as Airflow
has it, whether its DAG is paused, and the recoveries row the run left (its refusal or failure).

Airflow's metadata is reached through ``AirflowRuns`` (the api-server's own database session), so tests
of the pages can hand in their own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

from sqlalchemy import Engine

from coordinator.checkpoints import recovery
from coordinator.checkpoints.store import CheckpointStore

#: the states of a run that is still to finish
ACTIVE = ("queued", "running")


class RecoveryUnderWay(Exception):
    """A recovery of the job is queued or running: nothing was started."""

    def __init__(self, message: str, dag_run_id: str | None) -> None:
        super().__init__(message)
        self.dag_run_id = dag_run_id


@dataclass(frozen=True)
class Run:
    dag_run_id: str
    state: str
    paused: bool


class AirflowRuns(Protocol):
    def active(self, dag_id: str) -> list[str]: ...
    def trigger(self, dag_id: str, conf: dict[str, Any], user_name: str) -> Run: ...
    def run(self, dag_id: str, dag_run_id: str) -> Run | None: ...


class MetadataRuns:
    """The api-server's Airflow metadata database: the runs of a DAG, and a new manual run, as Airflow's
    own ``airflow dags trigger`` creates it (validated against the DAG's Params)."""

    def active(self, dag_id: str) -> list[str]:
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            return list(session.scalars(select(DagRun.run_id).where(
                DagRun.dag_id == dag_id, DagRun.state.in_(ACTIVE)).order_by(DagRun.id)))

    def trigger(self, dag_id: str, conf: dict[str, Any], user_name: str) -> Run:
        from airflow.api.common.trigger_dag import trigger_dag
        from airflow.utils.types import DagRunTriggeredByType

        dag_run = trigger_dag(dag_id, conf=conf, triggered_by=DagRunTriggeredByType.UI,
                              triggering_user_name=user_name)
        assert dag_run is not None
        return self.run(dag_id, dag_run.run_id) or Run(dag_run.run_id, "queued", False)

    def run(self, dag_id: str, dag_run_id: str) -> Run | None:
        from airflow.models.dag import DagModel
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            state = session.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == dag_run_id))
            paused = session.scalar(select(DagModel.is_paused).where(DagModel.dag_id == dag_id))
        return None if state is None else Run(dag_run_id, str(state.value if hasattr(state, "value") else state),
                                               bool(paused))


def airflow_runs() -> AirflowRuns:
    """The runs the view starts and follows (a dependency, so tests can hand in their own)."""
    return MetadataRuns()


def conf(checkpoint_id: int, rewind: bool) -> dict[str, Any]:
    """The recover DAG's Params for a recovery to ``checkpoint_id`` from the view."""
    return {"checkpoint": checkpoint_id, "mode": "full", "rewind": rewind}


def kind(rewind: bool) -> recovery.RecoveryKind:
    return recovery.RecoveryKind.REWIND if rewind else recovery.RecoveryKind.RECOVER


def preview(engine: Engine, job: str, checkpoint_id: int, rewind: bool) -> recovery.RecoveryPreview:
    """What the recovery would change (CheckpointNotFoundError / UsageError: it would be refused)."""
    return recovery.preview(CheckpointStore(engine), job, kind(rewind), recovery.RecoveryMode.FULL, checkpoint_id)


def start(engine: Engine, runs: AirflowRuns, job: str, dag_id: str, checkpoint_id: int, rewind: bool,
          user_name: str) -> Run:
    """Trigger the recover DAG for this recovery, unless one of the job is under way (RecoveryUnderWay)."""
    store = CheckpointStore(engine)
    with store.sessions.begin() as s:
        store.lock_job(s, job)  # a second click waits here, then finds the first one's run
        active = runs.active(dag_id)
        if active:
            raise RecoveryUnderWay(f"a recovery of {job} is already under way: run {active[-1]} of {dag_id} is "
                                   f"queued or running", active[-1])
        row = recovery.running(s, job)
        if row is not None:
            raise RecoveryUnderWay(f"recovery #{row.id} of {job} ({row.kind}) is RUNNING since "
                                   f"{str(row.started_at)[:19]}", row.airflow_run_id)
        return runs.trigger(dag_id, conf(checkpoint_id, rewind), user_name)


def follow(engine: Engine, runs: AirflowRuns, job: str, dag_id: str, dag_run_id: str) -> dict[str, Any] | None:
    """The run's state, whether its DAG is paused, and the recoveries row it left; None: no such run."""
    run = runs.run(dag_id, dag_run_id)
    if run is None:
        return None
    row = recovery.of_airflow_run(CheckpointStore(engine), job, dag_run_id)
    return {**asdict(run), "dag_id": dag_id, "recovery": row, "message": describe(run, dag_id, row)}


def describe(run: Run, dag_id: str, row: dict[str, Any] | None) -> str:
    """The run's state as a sentence for the page."""
    if run.state == "queued":
        if run.paused:
            return (f"queued, and the DAG {dag_id} is paused: the run waits until it is unpaused "
                    f"(in Airflow's UI, or `airflow dags unpause {dag_id}`)")
        return "queued: waiting for the scheduler"
    if run.state == "running":
        return f"running: recovery #{row['id']} is {row['result']}" if row else "running: validating the request"
    if run.state == "success":
        if row is None:
            return "success"
        return f"success: recovery #{row['id']} {row['result']}" + (f": {row['detail']}" if row["detail"] else "")
    if run.state == "failed":
        if row and row["result"] == recovery.RecoveryResult.REFUSED:
            return f"failed: refused (recovery #{row['id']}, nothing changed): {row['detail']}"
        if row:
            return f"failed: recovery #{row['id']} {row['result']}: {row['detail'] or 'no detail recorded'}"
        return "failed before the recovery started: see the run's task logs in Airflow"
    return run.state
