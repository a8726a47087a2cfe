"""The barrier and epoch DAGs, run with dag.test(): PostgreSQL catalog, SparkSubmitOperator submitting to local Spark.

Barriers keep being injected while processing fails; the next epochs run
processes every pending epoch in order, and the sink equals an independent
recount.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

from absreplay.airflow.airflow_demo import dags_folder, isolate_airflow_home, migrate_airflow_db

HOME = isolate_airflow_home("local[2]")  # before airflow is imported: its configuration is read once
# OpenLineage events go to a file (the provider's file transport): the views test reads its lineage there
LINEAGE = HOME / "openlineage.jsonl"
os.environ["AIRFLOW__OPENLINEAGE__TRANSPORT"] = json.dumps({"type": "file", "log_file_path": str(LINEAGE),
                                                            "append": True})

import pytest  # noqa: E402
from airflow.dag_processing.dagbag import DagBag  # noqa: E402
from airflow.models.asset import AssetEvent, AssetModel  # noqa: E402
from airflow.models.renderedtifields import RenderedTaskInstanceFields  # noqa: E402
from airflow.models.taskinstance import TaskInstance  # noqa: E402
from airflow.utils.session import create_session  # noqa: E402
from sqlalchemy import select  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from coordinator.checkpoints.lifecycle import CheckpointStatus  # noqa: E402
from tests.helpers import JOBS_DIR, Workspace, make_workspace  # noqa: E402

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.postgres, pytest.mark.heavy(seconds=170)]

# the test server trusts loopback, so a password in the URL is never asked for: it only has to stay out of sight
PASSWORD = "NotShownAnywhere7"


@pytest.fixture(scope="module")
def dags() -> dict:
    migrate_airflow_db(dict(os.environ))
    bag = DagBag(dag_folder=dags_folder())
    assert bag.import_errors == {}
    # the DAG retries a failed spark-submit after a minute; the test does not wait that long
    for task in bag.dags["abs_wordcount_epochs"].tasks:
        task.retry_delay = timedelta(seconds=1)
    return bag.dags


@pytest.fixture
def ws(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    ws = make_workspace(tmp_path, pg_url)
    env = ws.settings.as_env()
    for key in ("ABS_HOME", "ABS_DATA_DIR", "ABS_STATE_URI"):
        monkeypatch.setenv(key, env[key])
    # the Variable names the catalog; the environment's URL is a catalog without schema, to prove it
    monkeypatch.setenv("ABS_DATABASE_URL", f"sqlite:///{tmp_path / 'not-the-catalog.db'}")
    url = make_url(pg_url).set(password=PASSWORD).render_as_string(hide_password=False)
    monkeypatch.setenv("AIRFLOW_VAR_ABS_DATABASE_URL", url)
    return ws


def statuses(ws: Workspace) -> dict[int, str]:
    return {c.checkpoint_id: str(c.status) for c in ws.store.checkpoints(ws.job.name)}


def task_states(dag_id: str, run_id: str) -> dict[str, tuple[str, int]]:
    with create_session() as session:
        tis = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id))
        return {ti.task_id: (str(ti.state), ti.try_number) for ti in tis}


def rendered(dag_id: str, run_id: str, task_id: str) -> dict:
    with create_session() as session:
        return session.scalars(select(RenderedTaskInstanceFields).where(
            RenderedTaskInstanceFields.dag_id == dag_id, RenderedTaskInstanceFields.run_id == run_id,
            RenderedTaskInstanceFields.task_id == task_id)).one().rendered_fields


def barrier_events() -> list[int]:
    """The checkpoint ids carried by the barrier asset's events, oldest first."""
    with create_session() as session:
        events = session.scalars(
            select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == "abs_wordcount_barriers").order_by(AssetEvent.id)
        )
        return [e.extra["checkpoint_id"] for e in events]


def inject(dags: dict, ws: Workspace, batch: int) -> int:
    ws.land(batch)
    run = dags["abs_wordcount_barriers"].test()
    assert run.state == "success"
    return ws.store.job(ws.job.name).last_checkpoint_id


def test_barriers_keep_coming_while_epochs_fail_and_the_next_run_catches_up_in_order(
    dags: dict, ws: Workspace, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    events_before = len(barrier_events())
    epochs = dags["abs_wordcount_epochs"]

    # cycle 1: a barrier, then an epochs run that processes it
    assert inject(dags, ws, 0) == 1
    first = epochs.test()
    assert first.state == "success"
    fields = rendered("abs_wordcount_epochs", first.run_id, "process_epochs")
    assert fields["py_files"].startswith(str(Path(os.environ["ABS_HOME"]) / "pyfiles" / "absreplay-pyfiles-"))
    assert fields["application_args"] == ["wordcount", "--snapshot-mode", "async"]
    assert fields["env_vars"]["ABS_DATA_DIR"] == os.environ["ABS_DATA_DIR"]
    assert "***" in fields["env_vars"]["ABS_DATABASE_URL"] and PASSWORD not in str(fields)
    assert statuses(ws) == {1: CheckpointStatus.COMPLETED}
    assert ws.committed() == ws.expected_at(1) != {}

    # cycle 2: processing fails on both tries; barriers are injected before and after the failure
    assert inject(dags, ws, 1) == 2
    monkeypatch.setenv("ABS_FAULTS", "epoch.compute=raise")
    failed = epochs.test()
    monkeypatch.delenv("ABS_FAULTS")
    assert failed.state == "failed"
    assert task_states("abs_wordcount_epochs", failed.run_id) == {
        "process_epochs": ("failed", 2), "finalize": ("upstream_failed", 0)}
    assert inject(dags, ws, 2) == 3
    assert inject(dags, ws, 3) == 4
    assert statuses(ws) == {1: "COMPLETED", 2: "PENDING", 3: "PENDING", 4: "PENDING"}
    assert ws.committed() == ws.expected_at(1)  # nothing of the failed run reached the sink

    # cycle 3: one run processes the three pending epochs, in order, and commits them
    assert epochs.test().state == "success"
    history = {r["checkpoint_id"]: r for r in ws.store.history(ws.job.name)}
    # retention keeps the newest 3 completed checkpoints
    assert {cid: r["status"] for cid, r in history.items()} == {
        1: "SUBSUMED", 2: "COMPLETED", 3: "COMPLETED", 4: "COMPLETED"}
    assert all(history[c]["acked_tasks"] == history[c]["total_tasks"] for c in (2, 3, 4))
    completed_at = [ws.store.checkpoint(ws.job.name, c).completed_at for c in (2, 3, 4)]
    assert completed_at == sorted(completed_at)
    assert ws.committed() == ws.expected_latest() == ws.expected_at(4)
    assert barrier_events()[events_before:] == [1, 2, 3, 4]
    out, err = capfd.readouterr()
    assert "Spark-Submit cmd" in out + err and PASSWORD not in out + err


def test_a_job_from_the_jobs_folder_gets_dags_that_run_it_exactly_once(
    dags: dict, ws: Workspace, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/jobs/views_by_country.py, found through ABS_JOBS_DIR: its barrier DAG injects, its epochs
    DAG spark-submits the job's code (from the jobs folder, not a package) and commits both sinks,
    twice, and nothing is lost or counted twice (``dags``: the Airflow database is migrated)."""
    from absreplay.job_discovery import get_job
    from tests import views_data

    jobs = str(JOBS_DIR)
    monkeypatch.setenv("ABS_JOBS_DIR", jobs)
    monkeypatch.setenv("VIEWS_SQL_URL", pg_url)
    monkeypatch.setenv("VIEWS_DELTA", str(tmp_path / "delta" / "views"))
    bag = DagBag(dag_folder=dags_folder())
    assert bag.import_errors == {}
    views = make_workspace(tmp_path / "views", pg_url, get_job("views_by_country"), jobs_dir=jobs)
    monkeypatch.setenv("ABS_DATA_DIR", str(views.settings.data_dir))
    for task in bag.dags["abs_views_by_country_epochs"].tasks:
        task.retry_delay = timedelta(seconds=1)
    for batch in range(2):
        views_data.land(views.input_dir, batch)
        assert bag.dags["abs_views_by_country_barriers"].test().state == "success"
        assert bag.dags["abs_views_by_country_epochs"].test().state == "success"
    assert statuses(views) == {1: "COMPLETED", 2: "COMPLETED"}
    sinks = {s.name: s.target(pg_url).read() for s in views.job.sinks if not s.name.endswith("_late")}
    assert views_data.check(views.store, "views_by_country", views.input_dir, sinks) == {
        "to_postgres": (0, 0), "to_delta": (0, 0)}
    assert sinks["to_delta"].num_rows > 0
    # lineage: each processing run reported the job's two sources in and its two sinks out, with schemas
    events = [json.loads(line) for line in LINEAGE.read_text().splitlines()]
    done = [e for e in events if e["eventType"] == "COMPLETE"
            and e["job"]["name"] == "abs_views_by_country_epochs.process_epochs"]
    assert len(done) == 2
    url = make_url(pg_url)
    for event in done:
        ins = {(d["namespace"], d["name"]): [f["name"] for f in d["facets"]["schema"]["fields"]] for d in event["inputs"]}
        outs = {(d["namespace"], d["name"]): [f["name"] for f in d["facets"]["schema"]["fields"]]
                for d in event["outputs"]}
        data = views.settings.data_dir / "views_by_country" / "input"
        assert ins == {("file", str(data / "views")): ["user", "page", "ts", "ms"],
                       ("file", str(data / "users")): ["user", "country"]}
        assert outs == {
            (f"postgres://{url.host}:{url.port or 5432}", f"{url.database}.public.views_per_minute"):
                ["country", "page", "window_start", "window_end", "views", "ms"],
            ("file", str(tmp_path / "delta" / "views")): ["country", "page", "window_start", "window_end", "views", "ms"],
            # the window's late views: the catalog's dead letters (the Variable's catalog, the same database)
            (f"postgres://{url.host}:{url.port or 5432}", f"{url.database}.public.dead_letters"):
                ["partition", "offset", "reason", "payload"],
        }
