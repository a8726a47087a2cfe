"""The barrier and epoch DAGs, run with dag.test(): PostgreSQL catalog, SparkSubmitOperator submitting to local Spark.

Barriers keep being injected while processing fails; the next epochs run
processes every pending epoch in order, and the sink equals an independent
recount. The recover DAG's refusals: one its driver makes after the DAG checked
the request, and a checkpoint id past the catalog's. A barrier and an epochs run
with the input and the state root on an S3 server (tests/servers/s3.py).
"""

from __future__ import annotations

import copy
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

from absreplay.commands.airflow_demo import dags_folder, isolate_airflow_home, migrate_airflow_db

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


@pytest.fixture(autouse=True)
def form_defaults(dags: dict):
    """dag.test() runs every task in this process, and Airflow's process_params sets a run's conf on the Param
    objects the DAG and its tasks share: one test's form values would be the next test's defaults, which no
    scheduler does. Each test starts from the values the DAG files gave."""
    params = [p for dag in dags.values() for held in (dag.params, *(t.params for t in dag.tasks))
              for p in (held.get_param(k) for k in held)]
    saved = [(p, copy.deepcopy(p.value)) for p in params]
    yield
    for param, value in saved:
        param.value = value


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
    from coordinator.dataflow.discovery import get_job
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


# `absreplay`, as the recover DAG runs it, while a processing run of the job completes checkpoint 4 and its
# finalize subsumes checkpoint 1: after the command line checked the request, before spark-submit's driver does
FINALIZE_WHILE_SUBMITTING = """
from absreplay.commands import cli, submit
from coordinator.dataflow.discovery import get_job
from coordinator.catalog.db import make_engine
from coordinator.checkpoints.coordinator import CheckpointCoordinator
from coordinator.checkpoints.state_handle import StateHandle
from coordinator.checkpoints.store import CheckpointStore

spark_submit = submit.run_processing


def run_processing(settings, app_args, app=submit.PROCESS_APP):
    store, job = CheckpointStore(make_engine(settings.database_url)), get_job("wordcount")
    store.ack_many(job.name, 4, [StateHandle(t.operator, t.subtask) for t in job.execution_graph.tasks])
    subsumed = CheckpointCoordinator(store, job, settings.data_dir, settings.state_uri).finalize().subsumed
    print(f"meanwhile a finalize subsumed {subsumed}", flush=True)
    return spark_submit(settings, app_args, app)


submit.run_processing = run_processing
cli.main()
"""


def follow_page(ws: Workspace, run_id: str) -> dict:
    """What the view's follow page shows of the recover DAG's run (its API, which the page polls)."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from absreplay.airflow_plugin.access import auth_manager
    from absreplay.airflow_plugin.app import app
    from absreplay.airflow_plugin.catalog import catalog_engine

    app.dependency_overrides[auth_manager] = SimpleAuthManager
    app.dependency_overrides[catalog_engine] = lambda: ws.store.engine
    app.dependency_overrides[get_user] = lambda: SimpleAuthManagerUser(username="admin", role="admin")
    try:
        response = TestClient(app, raise_server_exceptions=False).get(f"/api/jobs/wordcount/runs/{run_id}")
    finally:
        app.dependency_overrides.clear()
    assert response.status_code == 200, response.text
    return response.json()


def test_a_rewind_whose_checkpoint_a_finalize_subsumes_meanwhile_is_refused_and_recorded_for_its_run(
    dags: dict, ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The request is valid when the DAG checks it and when the command line does; the driver, started by
    spark-submit, finds checkpoint 1 SUBSUMED. The run fails once (no retry) with the driver's error line, not
    the JVM's first line on stderr, and leaves a REFUSED row with its id, which the log and the view name."""
    from absreplay.airflow import orchestration, recovery_tasks
    from coordinator.checkpoints import recovery

    for batch in range(4):
        ws.land(batch, lines=20, partitions=1)
        assert orchestration.inject_barrier(ws.settings, "wordcount")["checkpoint_id"] == batch + 1
    for checkpoint_id in (1, 2, 3):
        ws.complete(checkpoint_id)
    earlier = recovery.refuse(ws.store, "wordcount", "recover", "full", 3, "an earlier run's refusal", "manual__old")
    command = tmp_path / "absreplay"
    command.write_text(f"#!{sys.executable}\n{FINALIZE_WHILE_SUBMITTING}")
    command.chmod(0o755)
    monkeypatch.setattr(recovery_tasks, "absreplay_executable", lambda: str(command))

    run = dags["abs_wordcount_recover"].test(run_conf={"checkpoint": 1, "mode": "full", "rewind": True})
    assert run.state == "failed"
    assert task_states("abs_wordcount_recover", run.run_id) == {
        "validate_request": ("success", 1), "run_recovery": ("failed", 1)}
    assert statuses(ws) == {1: "SUBSUMED", 2: "COMPLETED", 3: "COMPLETED", 4: "COMPLETED"}
    rows = recovery.history(ws.store, "wordcount", run.run_id)
    assert [(r["kind"], r["result"], r["requested_checkpoint_id"]) for r in rows] == [("rewind", "REFUSED", 1)]
    reason = rows[0]["detail"]
    assert reason.startswith("checkpoint 1 of job 'wordcount' is SUBSUMED") and "WARNING" not in reason
    out, err = capfd.readouterr()
    assert "meanwhile a finalize subsumed [1]" in out + err
    assert f"`absreplay rewind wordcount --to 1 --airflow-run-id {run.run_id}` exited 2: {reason}" in out + err
    assert f"recovery #{rows[0]['id']} (rewind, full): REFUSED" in out + err
    assert f"recovery #{earlier} " not in out + err
    followed = follow_page(ws, run.run_id)
    assert (followed["state"], followed["recovery"]["id"]) == ("failed", rows[0]["id"])
    assert followed["message"] == f"failed: refused (recovery #{rows[0]['id']}, nothing changed): {reason}"


def test_a_checkpoint_id_past_the_catalogs_fails_the_recover_task_once_with_the_message(
    dags: dict, ws: Workspace, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The form's schema refuses 2^63 (tests/airflow/test_dags.py); a run that got it past a form without
    that bound (one parsed before it was added) fails its first task at once, never with the driver's overflow."""
    from airflow.sdk import Param

    from coordinator.dataflow.discovery import get_job
    from coordinator.checkpoints import recovery
    from dags import abs_recover

    monkeypatch.setattr(abs_recover, "PARAMS", {
        **abs_recover.PARAMS, "checkpoint": Param(None, type=["null", "integer"], minimum=1)})
    unbounded = abs_recover.recover_dag(get_job("wordcount"))

    run = unbounded.test(run_conf={"checkpoint": 2**63})
    assert run.state == "failed"
    assert task_states("abs_wordcount_recover", run.run_id) == {
        "validate_request": ("failed", 1), "run_recovery": ("upstream_failed", 0)}
    message = ("checkpoint must be a whole number from 1 to 9223372036854775807, or empty for the latest "
               "completed one; got 9223372036854775808")
    out, err = capfd.readouterr()
    assert message in out + err and "NumericValueOutOfRange" not in out + err
    rows = recovery.history(ws.store, "wordcount", run.run_id)
    assert [(r["result"], r["requested_checkpoint_id"], r["detail"]) for r in rows] == [("REFUSED", None, message)]



def test_the_recover_form_upgrades_a_changed_job_from_the_start_of_its_input(dags: dict, ws: Workspace) -> None:
    """The form's upgrade box: wordcount's tokenizer changed since its checkpoints (their version, edited in the
    catalog), so `absreplay upgrade --from-start` replays every epoch into the job as declared; the run
    succeeds, its upgrade is a row naming this Airflow run, and the counts equal a recount (``tests/sink_check``)."""
    from absreplay.airflow import orchestration
    from coordinator.dataflow.discovery import get_job
    from coordinator.checkpoints import recovery
    from coordinator.dataflow.versions import describe
    from sqlalchemy import text

    for batch in range(2):
        ws.land(batch, lines=20, partitions=1)
        orchestration.inject_barrier(ws.settings, "wordcount")
        ws.complete(batch + 1)
    old = describe(get_job("wordcount"))
    old["params"]["tokenize"]["code"] = "0" * 12
    with ws.store.engine.begin() as c:
        c.execute(text("INSERT INTO job_versions (job, digest, summary, parts, first_run_at) "
                       "VALUES ('wordcount', 'old-tokenizer', 'before the fix', :parts, now())"),
                  {"parts": json.dumps(old)})
        c.execute(text("UPDATE checkpoints SET job_version = 'old-tokenizer'"))
    run = dags["abs_wordcount_recover"].test(run_conf={"upgrade": True})
    assert run.state == "success"
    [row] = recovery.history(ws.store, "wordcount", run.run_id)
    assert (row["kind"], row["result"]) == ("upgrade", "SUCCEEDED"), row
    with ws.store.engine.connect() as c:
        assert c.execute(text("SELECT requested_by, replayed_from FROM upgrades")).one() == (run.run_id, 0)
    assert ws.committed() == ws.expected_latest() and ws.committed()


@pytest.fixture
def s3(tmp_path: Path):
    from tests.servers.s3 import s3_server

    with s3_server(tmp_path / "s3") as server:  # up until the sink is judged, after the test's body
        yield server


def test_the_dags_run_a_barrier_and_an_epoch_with_input_and_state_on_s3(
    dags: dict, tmp_path: Path, pg_url: str, s3, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.fs as pafs

    # the cluster's Spark configuration: the S3A jars and settings, which the barrier task reads too
    monkeypatch.setenv("SPARK_CONF_DIR", str(s3.spark_conf_dir(tmp_path / "spark-conf")))
    bucket = s3.bucket("abs")
    ws = make_workspace(tmp_path, pg_url, env={"ABS_DATA_DIR": f"{bucket}/input", "ABS_STATE_URI": f"{bucket}/state"})
    for key, value in ws.settings.as_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AIRFLOW_VAR_ABS_DATABASE_URL", raising=False)
    assert inject(dags, ws, 0) == 1
    assert ws.store.cut(ws.job.name, 1) == {"p0": 400, "p1": 400}
    assert dags["abs_wordcount_epochs"].test().state == "success"
    assert statuses(ws) == {1: CheckpointStatus.COMPLETED}
    assert ws.committed() == ws.expected_at(1) != {}
    state = s3.filesystem().get_file_info(pafs.FileSelector("abs/state/wordcount", recursive=True))
    assert any(f.path.endswith("/_manifest.json") for f in state), [f.path for f in state]
