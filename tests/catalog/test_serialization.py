"""Everything that changes a job's checkpoints, sink or marks is serialized per job by the
database, and a processing run that lost its lease cannot write (fencing).

Issue 10, items 3 and 6: under READ COMMITTED two finalizes could both commit the same staged
output, the slower one writing older values over newer ones and moving the marks back; an
advisory lock whose connection dropped let a run go on writing beside the run that took over.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from sqlalchemy import text

from coordinator.sinks.sql_table import SqlTableTarget
from coordinator.catalog.db import make_engine
from coordinator.checkpoints.coordinator import CheckpointCoordinator
from coordinator.errors import FencedError
from coordinator.checkpoints.lease import lease_key, processing_lease
from coordinator.checkpoints.lifecycle import AckResult, CheckpointStatus, FailureReason
from coordinator.checkpoints.store import CheckpointStore
from tests.helpers import cli, cli_ok, lost_and_duplicated, make_workspace, patched_env, stage_counts

SLOW = "slow-finalize"


def marks(ws) -> list[tuple]:
    with ws.store.engine.connect() as c:
        return c.execute(text('SELECT partition, "offset", checkpoint_id FROM sink_watermarks ORDER BY 1')).all()


def test_a_slow_finalize_never_writes_older_output_over_a_newer_commit(tmp_path, catalog_url, monkeypatch) -> None:
    """Finalize B reads checkpoint 1's staged output, then stalls; checkpoint 2 completes and finalize A
    commits 1 and 2. When B goes on it must not write checkpoint 1's values over 2's, nor move the
    marks back to 1's cut (on PostgreSQL it did: nothing serialized the two)."""
    ws = make_workspace(tmp_path, catalog_url)
    for cut in (10, 20):
        ws.store.trigger(ws.job.name, lambda s, cid, end=cut: ({"p0": end}, 0, 0))
    stage_counts(ws, 1, {"a": 1, "b": 1}, None)
    ws.complete(1)

    inside = threading.Event()
    real_upsert = SqlTableTarget.upsert

    def stalling_upsert(self, conn, checkpoint_id, rows):
        if threading.current_thread().name == SLOW:
            inside.set()
            time.sleep(1.5)
        return real_upsert(self, conn, checkpoint_id, rows)

    monkeypatch.setattr(SqlTableTarget, "upsert", stalling_upsert)
    errors: list[BaseException] = []

    def slow_finalize() -> None:
        try:
            CheckpointCoordinator(CheckpointStore(make_engine(catalog_url)), ws.job, ws.settings.data_dir,
                                  ws.settings.state_uri).finalize()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    slow = threading.Thread(target=slow_finalize, name=SLOW)
    slow.start()
    assert inside.wait(30)
    stage_counts(ws, 2, {"a": 5}, 1)
    assert ws.complete(2) == [AckResult.SUCCESS] * len(ws.job.execution_graph.tasks)
    ws.coordinator.finalize()
    slow.join(60)
    assert not errors, errors
    assert ws.committed() == {"a": 5, "b": 1}
    assert marks(ws) == [("p0", 20, 2)]
    with ws.store.engine.connect() as c:
        status = dict(c.execute(text("SELECT checkpoint_id, status FROM sink_transactions")).all())
    assert status == {1: "COMMITTED", 2: "COMMITTED"}


def test_a_run_whose_lease_was_taken_over_cannot_ack_decline_or_commit(tmp_path, catalog_url) -> None:
    ws = make_workspace(tmp_path, catalog_url)
    engine = ws.store.engine
    with processing_lease(engine, ws.job.name) as first:
        pass  # run A's lease is gone (its connection dropped); A goes on with its token
    with processing_lease(make_engine(catalog_url), ws.job.name) as second:
        assert second == first + 1
        cid = ws.store.trigger(ws.job.name, lambda s, c: ({"p0": 5}, 0, 0)).checkpoint_id
        stale, owner = ws.store.fenced(first), ws.store.fenced(second)
        with pytest.raises(FencedError, match=rf"lost its lease \(fencing token {first}, the job is at {second}\)"):
            ws.complete(cid, store=stale)
        with pytest.raises(FencedError):
            stale.fail(ws.job.name, cid, FailureReason.TASK_DECLINED)
        with pytest.raises(FencedError):
            CheckpointCoordinator(stale, ws.job, ws.settings.data_dir, ws.settings.state_uri).finalize()
        assert ws.store.acks(ws.job.name, cid) == []
        ws.complete(cid, store=owner)
        assert ws.store.checkpoint(ws.job.name, cid).status == CheckpointStatus.COMPLETED


def advisory_holder(engine, job: str) -> int | None:
    """The backend pid holding the job's processing lease (a bigint advisory key: classid, objid)."""
    key = lease_key(job) & 0xFFFFFFFFFFFFFFFF
    with engine.connect() as c:
        return c.execute(text(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
            "AND classid::bigint = :hi AND objid::bigint = :lo "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ), {"hi": key >> 32, "lo": key & 0xFFFFFFFF}).scalar()


@pytest.mark.heavy(seconds=20)
def test_a_run_whose_lease_connection_dropped_is_fenced_off(tmp_path, pg_url, spark) -> None:
    """The lease connection of run A is terminated while A writes its snapshot; run B takes the
    lease. A must not ack (checkpoint 1 stays PENDING), says why in one line, and exits 1; the job
    then finishes exactly once."""
    ws = make_workspace(tmp_path, pg_url)
    ws.land(0)
    ws.coordinator.inject()
    result = {}
    run_a = threading.Thread(target=lambda: result.setdefault("a", cli(
        ws, "process", "wordcount", spark=spark, env={"ABS_FAULTS": "snapshot.before_ack@1=sleep:6"})))
    run_a.start()
    deadline = time.monotonic() + 120
    while not ws.store.sink_rows(ws.job.name, 1) and time.monotonic() < deadline:
        time.sleep(0.1)  # A staged checkpoint 1: it is now asleep before its acks
    pid = advisory_holder(ws.store.engine, ws.job.name)
    assert pid is not None
    with ws.store.engine.connect() as c:
        # with a timeout, PostgreSQL (14+) returns once the backend is gone and its advisory lock with it; without
        # one it only signals the backend, and run B could still find the lease held on a loaded machine
        assert c.execute(text("SELECT pg_terminate_backend(:pid, 60000)"), {"pid": pid}).scalar()
    with processing_lease(make_engine(pg_url), ws.job.name):  # run B starts
        run_a.join(120)
    a = result["a"]
    assert a.code == 1, a.out + a.err
    assert "lost its lease" in a.err and "Traceback" not in a.err
    assert ws.store.checkpoint(ws.job.name, 1).status == CheckpointStatus.PENDING
    assert ws.store.acks(ws.job.name, 1) == []
    cli_ok(ws, "process", "wordcount", spark=spark)
    cli_ok(ws, "finalize", "wordcount")
    assert lost_and_duplicated(ws.expected_latest(), ws.committed()) == (0, 0)


@pytest.mark.heavy(seconds=60)
def test_concurrent_finalizes_processes_and_recoveries_lose_and_duplicate_nothing(tmp_path, pg_url, spark) -> None:
    """The DAG's finalize and maintenance, a CLI finalize and a second processing attempt run in
    threads beside rounds of inject + process / recover on PostgreSQL: the sink ends exact and the
    high-water marks never move back."""
    from absreplay.airflow import orchestration

    ws = make_workspace(tmp_path, pg_url)
    stop = threading.Event()
    problems: list[str] = []
    seen: dict[str, int] = {}

    def forever(name: str, step) -> threading.Thread:
        def loop() -> None:
            while not stop.is_set():
                try:
                    step()
                except BaseException as exc:  # noqa: BLE001 - every failure is a finding
                    problems.append(f"{name}: {exc.__class__.__name__}: {exc}")
                time.sleep(0.01)
        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        return thread

    def watch_marks() -> None:
        for partition, offset, _ in marks(ws):
            if offset < seen.get(partition, 0):
                problems.append(f"mark of {partition} moved back: {seen[partition]} -> {offset}")
            seen[partition] = max(offset, seen.get(partition, 0))

    def second_run() -> None:
        # 2: the lease is held (its message may land in another thread's captured stderr: the
        # capture is process-wide); anything else is a finding
        r = cli(ws, "process", "wordcount", spark=spark)
        if r.code not in (0, 2):
            problems.append(f"second process exited {r.code}: {r.err.strip()}")

    threads = [
        forever("dag-finalize", lambda: orchestration.finalize_checkpoints(ws.settings, "wordcount")),
        forever("cli-finalize", lambda: cli_ok(ws, "finalize", "wordcount")),
        forever("dag-maintenance", lambda: orchestration.maintain_job(ws.settings, "wordcount")),
        forever("marks", watch_marks),
    ]
    try:
        for batch in range(6):
            ws.land(batch, lines=300)
            ws.coordinator.inject()
            contender = threading.Thread(target=second_run)
            contender.start()
            command = ("recover", "wordcount") if batch % 3 == 2 else ("process", "wordcount")
            r = cli(ws, *command, spark=spark)
            assert r.code in (0, 2), r.out + r.err
            contender.join(120)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    cli_ok(ws, "process", "wordcount", spark=spark)
    cli_ok(ws, "finalize", "wordcount")
    assert problems == []
    assert lost_and_duplicated(ws.expected_latest(), ws.committed()) == (0, 0)
    assert ws.store.latest_completed(ws.job.name).checkpoint_id >= 6


def test_overlapping_commands_keep_their_environment_until_the_last_one_ends() -> None:
    """What the threads of the test above rely on: ``cli`` sets the workspace's variables for the command's
    duration, and a command ending while another still runs leaves them set for it."""
    first, second = patched_env({"ABS_HOME": "/ws"}), patched_env({"ABS_HOME": "/ws"})
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert os.environ.get("ABS_HOME") == "/ws"  # the second command still runs
    second.__exit__(None, None, None)
    assert "ABS_HOME" not in os.environ  # as before either (conftest's _clean_env unsets it)
