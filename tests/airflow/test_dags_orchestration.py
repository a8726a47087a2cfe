"""What the DAG tasks do (absreplay.airflow.orchestration, absreplay.commands.pyfiles), against SQLite and PostgreSQL catalogs."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

from absreplay.commands.airflow_demo import isolate_airflow_home, spark_connection

isolate_airflow_home()  # task_errors imports airflow

import pytest  # noqa: E402
from sqlalchemy import text  # noqa: E402

from absreplay.airflow import orchestration, recovery_tasks  # noqa: E402
from absreplay.commands.pyfiles import PREFIX, build_pyfiles_zip  # noqa: E402
from coordinator.catalog.models import Job, utcnow  # noqa: E402
from coordinator.checkpoints import recovery  # noqa: E402
from coordinator.checkpoints.lifecycle import FailureReason  # noqa: E402
from coordinator.errors import AbsError, CatalogUnavailableError, CheckpointNotFoundError, UsageError  # noqa: E402
from coordinator.settings import Settings  # noqa: E402
from tests.helpers import Workspace, make_workspace  # noqa: E402


@pytest.fixture
def ws(tmp_path: Path, catalog_url: str) -> Workspace:
    return make_workspace(tmp_path, catalog_url)


def set_policy(ws: Workspace, **columns: int) -> None:
    assignments = ", ".join(f"{k} = :{k}" for k in columns)
    with ws.store.engine.begin() as c:
        c.execute(text(f"UPDATE jobs SET {assignments} WHERE name = :job"), {**columns, "job": ws.job.name})


def catalog_snapshot(ws: Workspace) -> list[dict]:
    return [{k: v for k, v in row.items()} for row in ws.store.history(ws.job.name)]


# -- settings ---------------------------------------------------------------------------
def test_the_variable_names_the_catalog_else_the_environment(tmp_path: Path) -> None:
    env = {"ABS_HOME": str(tmp_path), "ABS_DATABASE_URL": "sqlite:////from/env.db", "ABS_DATA_DIR": "/data"}
    assert orchestration.resolve_settings("postgresql://u@h:5432/cat", env).database_url == "postgresql://u@h:5432/cat"
    fallback = orchestration.resolve_settings(None, env)
    assert fallback.database_url == "sqlite:////from/env.db"
    assert fallback.data_dir == Path("/data")
    assert orchestration.resolve_settings("", env).database_url == "sqlite:////from/env.db"
    home_only = {"ABS_HOME": str(tmp_path)}
    assert orchestration.resolve_settings(None, home_only) == Settings.from_env(home_only)


def test_the_driver_gets_the_catalog_data_and_state_settings(tmp_path: Path) -> None:
    settings = Settings.from_env({"ABS_HOME": str(tmp_path), "ABS_DATABASE_URL": "postgresql://u:pw@h/db",
                                  "ABS_STATE_URI": "s3a://bucket/state"})
    assert orchestration.driver_env(settings) == {
        "ABS_HOME": str(tmp_path),
        "ABS_DATABASE_URL": "postgresql://u:pw@h/db",
        "ABS_DATA_DIR": str(tmp_path / "data"),
        "ABS_STATE_URI": "s3a://bucket/state",
        "ABS_PARALLELISM": "",
        "ABS_JOBS_DIR": "",
        "ABS_STATE_BACKEND": "local",
        "ABS_STORE_DIR": "",
    }
    assert orchestration.process_args("wordcount", "sync") == ["wordcount", "--snapshot-mode", "sync"]
    with pytest.raises(UsageError, match="unknown job 'nope'"):
        orchestration.process_args("nope", "async")
    assert orchestration.python_conf("/opt/py") == {"spark.pyspark.python": "/opt/py",
                                                    "spark.pyspark.driver.python": "/opt/py"}
    assert orchestration.python_conf()["spark.pyspark.python"] == sys.executable


def test_the_spark_connection_carries_the_master_as_the_hook_reads_it() -> None:
    assert spark_connection("local[2]") == '{"conn_type": "spark", "host": "local[2]"}'
    assert '"deploy-mode": "client"' in spark_connection("spark://10.0.0.1:7077", "client")


def test_bad_input_fails_without_retry_other_errors_retry() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    assert orchestration.fails_without_retry(CheckpointNotFoundError("wordcount", 9))
    assert not orchestration.fails_without_retry(CatalogUnavailableError("down"))
    assert not orchestration.fails_without_retry(AbsError("boom"))
    assert orchestration.fails_without_retry(recovery_tasks.RecoveryCommandError(["recover"], 2, "bad"))
    with pytest.raises(AirflowFailException, match="checkpoint 9 of job 'wordcount' does not exist"):
        with orchestration.task_errors():
            raise CheckpointNotFoundError("wordcount", 9)
    with pytest.raises(CatalogUnavailableError):
        with orchestration.task_errors():
            raise CatalogUnavailableError("catalog is down")


# -- py-files zip ---------------------------------------------------------------------------
def test_pyfiles_zip_holds_the_code_and_serves_it_without_the_installed_project(tmp_path: Path) -> None:
    first = build_pyfiles_zip(tmp_path)
    assert first.name.startswith(PREFIX)
    names = zipfile.ZipFile(first).namelist()
    assert "coordinator/__init__.py" in names
    assert "coordinator/catalog/db.py" in names
    assert "spark_jobs/process.py" in names
    assert "spark_jobs/operators/dataflow.py" in names
    assert "absreplay_examples/wordcount.py" in names  # a job package found through its entry point
    assert not [n for n in names if "__pycache__" in n or not n.endswith(".py")]
    mtime = first.stat().st_mtime_ns
    assert build_pyfiles_zip(tmp_path) == first and first.stat().st_mtime_ns == mtime  # cached
    # -S: no site-packages, so no editable install; the modules can only come from the zip
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import coordinator.errors as j; "
            "print(j.__file__, j.UnknownJobError.__name__)")
    proc = subprocess.run([sys.executable, "-S", "-c", code, str(first)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(str(first)) and "UnknownJobError" in proc.stdout


def test_pyfiles_zip_is_rebuilt_when_a_source_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "src" / "abs_pyfiles_probe"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("VERSION = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    cache = tmp_path / "cache"
    one = build_pyfiles_zip(cache, ("abs_pyfiles_probe",))
    (pkg / "__init__.py").write_text("VERSION = 2\n")
    two = build_pyfiles_zip(cache, ("abs_pyfiles_probe",))
    assert one != two and one.exists() and two.exists()
    assert zipfile.ZipFile(two).read("abs_pyfiles_probe/__init__.py") == b"VERSION = 2\n"
    assert not list(cache.glob(".building-*"))


# -- barriers, finalize, maintenance ------------------------------------------------------------
def test_inject_returns_the_barrier_and_says_when_the_policy_skips_it(ws: Workspace) -> None:
    ws.land(0, lines=10)
    barrier = orchestration.inject_barrier(ws.settings, "wordcount")
    assert barrier["checkpoint_id"] == 1 and barrier["decision"] == "EXECUTE"
    assert barrier["new_segments"] == 2 and barrier["new_records"] == 20
    assert barrier["cut"] == {"p0": 10, "p1": 10}
    set_policy(ws, max_concurrent_pending=1)
    skipped = orchestration.inject_barrier(ws.settings, "wordcount")
    assert skipped["checkpoint_id"] is None and skipped["decision"] == "SKIP_TOO_MANY_PENDING"
    assert "barrier skipped" in skipped["message"]


def test_finalize_reports_what_it_did(ws: Workspace) -> None:
    orchestration.inject_barrier(ws.settings, "wordcount")
    set_policy(ws, timeout_ms=0)
    report = orchestration.finalize_checkpoints(ws.settings, "wordcount")
    assert report["expired"] == [1]
    assert report["consecutive_failures"] == 1
    assert "expired 1" in report["message"]


def test_maintenance_expires_and_collects_unreferenced_state_of_every_catalog_job(ws: Workspace) -> None:
    with ws.store.sessions.begin() as s:  # a job this deployment does not define
        s.add(Job(name="legacy", execution_graph='{"operators": [], "edges": []}', total_tasks=0,
                  last_checkpoint_id=0, max_concurrent_pending=1, min_pause_ms=0, timeout_ms=1, tolerable_failures=0,
                  retained=1, full_snapshot_every=1, created_at=utcnow()))
    for _ in range(3):
        orchestration.inject_barrier(ws.settings, "wordcount")
    ws.complete(1)
    state = Path(ws.settings.state_uri) / "wordcount"
    for cid in (1, 2, 3, 4):  # 4: newer than any catalog row, a writer we cannot see
        (state / f"chk-{cid}" / "count" / "subtask=0").mkdir(parents=True)
    set_policy(ws, timeout_ms=0)
    ws.store.fail("wordcount", 3, FailureReason.TASK_DECLINED)

    assert orchestration.catalog_jobs(ws.settings) == ["legacy", "wordcount"]
    report = orchestration.maintain_job(ws.settings, "wordcount")
    assert report["expired"] == [2]
    assert sorted(Path(d).name for d in report["deleted_dirs"]) == ["chk-2", "chk-3"]
    assert sorted(p.name for p in state.iterdir()) == ["chk-1", "chk-4"]
    legacy = orchestration.maintain_job(ws.settings, "legacy")
    assert legacy["deleted_dirs"] == [] and "not registered here" in legacy["message"]


# -- recovery ---------------------------------------------------------------------------
@pytest.fixture
def history(ws: Workspace) -> Workspace:
    """1 SUBSUMED, 2 FAILED, 3 COMPLETED, 4 PENDING."""
    for _ in range(3):
        orchestration.inject_barrier(ws.settings, "wordcount")
    ws.complete(1)
    ws.store.fail("wordcount", 2, FailureReason.TASK_DECLINED, "subtask count#1 declined")
    ws.complete(3)
    set_policy(ws, retained=1)
    assert ws.store.subsume_beyond_retention("wordcount") == [1]
    orchestration.inject_barrier(ws.settings, "wordcount")
    return ws


def test_recovery_defaults_to_the_latest_completed_checkpoint(history: Workspace) -> None:
    request = recovery_tasks.validate_recovery(history.settings, "wordcount", None, "full", False)
    assert request == {"job": "wordcount", "kind": "recover", "mode": "full", "checkpoint": 3, "fallback": False,
                       "airflow_run_id": None}
    assert recovery_tasks.command_args(request) == [
        "recover", "wordcount", "--checkpoint", "3", "--mode", "full"]
    rewind = recovery_tasks.validate_recovery(history.settings, "wordcount", 3, "full", True)
    assert recovery_tasks.command_args(rewind) == ["rewind", "wordcount", "--to", "3"]
    partial = recovery_tasks.validate_recovery(history.settings, "wordcount", 3, "partial", False)
    assert partial["mode"] == "partial"


BAD_REQUESTS = [
    (1, "full", False, "checkpoint 1 of job 'wordcount' is SUBSUMED: .* garbage-collected"),
    (2, "full", False, r"checkpoint 2 of job 'wordcount' is FAILED \(TASK_DECLINED\)"),
    (4, "full", False, "checkpoint 4 of job 'wordcount' is still PENDING"),
    (99, "full", False, "checkpoint 99 of job 'wordcount' does not exist"),
    (-1, "full", False, "checkpoint must be a whole number from 1 to 9223372036854775807"),
    (0, "full", False, "checkpoint must be a whole number from 1 to 9223372036854775807"),
    (2**63, "full", False, "checkpoint must be a whole number from 1 to 9223372036854775807.*got 9223372036854775808"),
    ("3", "full", False, "checkpoint must be a whole number from 1 to 9223372036854775807"),
    (True, "full", False, "checkpoint must be a whole number from 1 to 9223372036854775807"),
    (3, "quick", False, "mode must be full or partial, not 'quick'"),
    (3, "full", "yes", "rewind must be true or false"),
    (3, "partial", True, "use mode 'full' with rewind"),
]


def test_a_superseded_checkpoint_cannot_be_recovered(history: Workspace) -> None:
    with history.store.engine.begin() as c:
        c.execute(text("UPDATE checkpoints SET status = 'SUPERSEDED' WHERE checkpoint_id = 3"))
    with pytest.raises(UsageError, match="is SUPERSEDED: a recovery or rewind replaced it"):
        recovery_tasks.validate_recovery(history.settings, "wordcount", 3, "full", False)


def test_bad_recovery_requests_say_why_and_change_nothing(history: Workspace) -> None:
    before = catalog_snapshot(history)
    for checkpoint, mode, rewind, message in BAD_REQUESTS:
        with pytest.raises(UsageError, match=message) as raised:
            recovery_tasks.validate_recovery(history.settings, "wordcount", checkpoint, mode, rewind)
        assert orchestration.fails_without_retry(raised.value), (checkpoint, mode, rewind)
    assert catalog_snapshot(history) == before
    # each refusal is audited with its reason, and nothing else is
    refused = recovery.history(history.store, "wordcount")
    assert [r["result"] for r in refused] == ["REFUSED"] * len(BAD_REQUESTS)
    for row, (_, _, _, message) in zip(refused, BAD_REQUESTS, strict=True):
        assert re.search(message, row["detail"]), (row, message)


def test_an_upgrade_request_names_where_it_rebuilds_from_and_is_refused_like_a_recovery(history: Workspace) -> None:
    """The form's upgrade: the job's tokenizer changed since checkpoint 3 (its version, edited in the catalog),
    so the counts are rebuilt from the checkpoint given, or from the start of the input."""
    import json

    from coordinator.dataflow.discovery import get_job
    from coordinator.dataflow.versions import describe

    old = describe(get_job("wordcount"))
    old["params"]["tokenize"]["code"] = "0" * 12
    with history.store.engine.begin() as c:
        c.execute(text("INSERT INTO job_versions (job, digest, summary, parts, first_run_at) "
                       "VALUES ('wordcount', 'old-tokenizer', 'before the fix', :parts, :now)"),
                  {"parts": json.dumps(old), "now": utcnow()})
        c.execute(text("UPDATE checkpoints SET job_version = 'old-tokenizer' WHERE checkpoint_id = 3"))
    request = recovery_tasks.validate_recovery(history.settings, "wordcount", None, "full", False, upgrade=True)
    assert recovery_tasks.command_args(request) == ["upgrade", "wordcount", "--from-start"]
    request = recovery_tasks.validate_recovery(history.settings, "wordcount", 3, "full", False, False, "manual__1",
                                              True)
    assert recovery_tasks.command_args(request) == [
        "upgrade", "wordcount", "--from-checkpoint", "3", "--airflow-run-id", "manual__1"]
    before = catalog_snapshot(history)
    for checkpoint, rewind, upgrade, message in [
            (2, False, True, r"checkpoint 2 of job 'wordcount' is FAILED"),
            (3, True, True, "leave rewind and fallback off and mode 'full'"),
            (0, False, True, "checkpoint must be a whole number from 1 to 9223372036854775807, or empty to rebuild"),
            (3, False, "yes", "upgrade must be true or false")]:
        with pytest.raises(UsageError, match=message):
            recovery_tasks.validate_recovery(history.settings, "wordcount", checkpoint, "full", rewind, upgrade=upgrade)
    assert catalog_snapshot(history) == before
    assert [(r["kind"], r["result"]) for r in recovery.history(history.store, "wordcount")] == [
        ("upgrade", "REFUSED")] * 3 + [("recover", "REFUSED")]


def test_recovery_before_any_completed_checkpoint_starts_from_the_sources(ws: Workspace) -> None:
    orchestration.inject_barrier(ws.settings, "wordcount")
    request = recovery_tasks.validate_recovery(ws.settings, "wordcount", None, "full", False)
    assert request["checkpoint"] is None
    assert recovery_tasks.command_args(request) == ["recover", "wordcount", "--mode", "full"]
    # a rewind needs a checkpoint to go back to
    with pytest.raises(UsageError, match="job 'wordcount' has no completed checkpoint to rewind to yet"):
        recovery_tasks.validate_recovery(ws.settings, "wordcount", None, "full", True)


def test_recovery_runs_the_command_line_entry_and_fails_with_its_message(history: Workspace) -> None:
    request = recovery_tasks.validate_recovery(history.settings, "wordcount", 3, "full", False, True)
    assert recovery_tasks.command_args(request)[-1] == "--fallback"
    # between validation and the run, checkpoint 3 is subsumed: the command line refuses, exit 2
    orchestration.inject_barrier(history.settings, "wordcount")
    history.complete(4)
    history.complete(5)
    assert 3 in history.store.subsume_beyond_retention("wordcount")
    with pytest.raises(recovery_tasks.RecoveryCommandError,
                       match=r"`absreplay recover wordcount .*` exited 2: checkpoint 3 of job 'wordcount' is SUBSUMED") as raised:
        recovery_tasks.run_recovery(history.settings, request)
    assert raised.value.exit_code == 2
    assert orchestration.fails_without_retry(raised.value)


JVM = "Picked up JAVA_TOOL_OPTIONS: -XX:+UseSerialGC\nWARNING: Using incubator modules: jdk.incubator.vector\n"


def test_a_failed_recovery_command_is_reported_by_its_error_line_not_the_jvms_first_line() -> None:
    # the command line's own refusal, on its stderr
    assert recovery_tasks.command_error("error: checkpoint 3 of job 'wordcount' is SUBSUMED\n", "") == (
        "checkpoint 3 of job 'wordcount' is SUBSUMED")
    # the driver's refusal: spark-submit prints the driver's stderr on its stdout, after the JVM's own lines
    driver = ("wordcount: rewind from checkpoint 1 (full)\nerror: checkpoint 1 of job 'wordcount' is SUBSUMED\n"
              "recovery #2 (rewind, full): REFUSED; restored -, now at -, superseded 0\n"
              "  checkpoint 1 of job 'wordcount' is SUBSUMED\n")
    assert recovery_tasks.command_error(JVM, driver) == "checkpoint 1 of job 'wordcount' is SUBSUMED"
    # a bug in the driver: its traceback's exception, not the JVM's warning
    crash = ("Traceback (most recent call last):\n  File \"process.py\", line 1, in <module>\n    run()\n"
             "KeyError: 'cut'\nrecovery #3 (rewind, full): FAILED; restored -, now at -, superseded 0\n")
    assert recovery_tasks.command_error(JVM, crash) == "KeyError: 'cut'"
    assert recovery_tasks.command_error("", "") == "no message; stdout: "


def test_a_recovery_that_times_out_stops_its_whole_process_group(tmp_path: Path, monkeypatch) -> None:
    """The recover task's command starts spark-submit and a JVM that hold the job's lease: on a
    timeout they must go too, not only the command (a stand-in command with a child shows it)."""
    import os
    import time

    pid_file = tmp_path / "child.pid"
    fake = tmp_path / "absreplay"
    fake.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {pid_file}\nwait\n")
    fake.chmod(0o755)
    monkeypatch.setattr(recovery_tasks, "absreplay_executable", lambda: str(fake))
    monkeypatch.setattr(recovery_tasks, "RECOVERY_TIMEOUT_S", 2)
    request = {"job": "wordcount", "kind": "recover", "mode": "full", "checkpoint": 1, "fallback": False,
               "airflow_run_id": None}
    with pytest.raises(recovery_tasks.RecoveryCommandError, match="did not finish in 2 s; its whole process group"):
        recovery_tasks.run_recovery(Settings.from_env({"ABS_HOME": str(tmp_path)}), request)
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat") as fh:
                if fh.read().split(") ", 1)[1].startswith("Z"):
                    break  # killed, waiting for its new parent to reap it
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        pytest.fail(f"the recovery's child {child} outlived the timeout")


def test_an_unknown_state_backend_is_a_one_line_configuration_error(tmp_path: Path) -> None:
    from coordinator.errors import ConfigError

    with pytest.raises(ConfigError, match=r"ABS_STATE_BACKEND='rocks': expected one of local, spark"):
        Settings.from_env({"ABS_HOME": str(tmp_path), "ABS_STATE_BACKEND": "rocks"})
