"""The store contract: the same suite on SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import text

from coordinator.sinks import transactions as sinks
from coordinator.catalog.db import make_engine
from coordinator.catalog.models import utcnow
from absreplay_examples.definitions import wordcount
from coordinator.checkpoints.lifecycle import AckResult, CheckpointStatus, FailureReason, SinkTxnStatus
from coordinator.checkpoints.policy import TriggerDecision
from coordinator.checkpoints.store import CheckpointStore
from coordinator.checkpoints.state_handle import StateHandle

JOB = wordcount()
TASKS = [(t.operator, t.subtask) for t in JOB.execution_graph.tasks]


def no_cut(_session, _checkpoint_id):
    return {"p0": 0}, 0, 0


@pytest.fixture
def store(catalog_url: str) -> CheckpointStore:
    s = CheckpointStore(make_engine(catalog_url))
    s.register_job(JOB)
    return s


def ack_all(store: CheckpointStore, cid: int) -> list[AckResult]:
    return store.ack_many(JOB.name, cid, [StateHandle(op, i) for op, i in TASKS])


def test_trigger_allocates_increasing_ids_and_records_the_cut(store: CheckpointStore) -> None:
    ids = [store.trigger(JOB.name, no_cut).checkpoint_id for _ in range(3)]
    assert ids == [1, 2, 3]
    assert store.cut(JOB.name, 2) == {"p0": 0}
    assert [c.status for c in store.checkpoints(JOB.name)] == [CheckpointStatus.PENDING] * 3


def test_completed_only_after_every_task_acked(store: CheckpointStore) -> None:
    cid = store.trigger(JOB.name, no_cut).checkpoint_id
    for op, i in TASKS[:-1]:
        assert store.ack(JOB.name, cid, StateHandle(op, i)) is AckResult.SUCCESS
        assert store.checkpoint(JOB.name, cid).status == CheckpointStatus.PENDING
    assert store.ack(JOB.name, cid, StateHandle(*TASKS[-1])) is AckResult.SUCCESS
    ck = store.checkpoint(JOB.name, cid)
    assert ck.status == CheckpointStatus.COMPLETED and ck.completed_at is not None
    assert store.latest_completed(JOB.name).checkpoint_id == cid


def test_ack_outcomes_never_raise(store: CheckpointStore) -> None:
    cid = store.trigger(JOB.name, no_cut).checkpoint_id
    h = StateHandle("count", 0, state_rows=5)
    assert store.ack(JOB.name, cid, h) is AckResult.SUCCESS
    assert store.ack(JOB.name, cid, StateHandle("count", 0, state_rows=99)) is AckResult.DUPLICATE
    assert store.acks(JOB.name, cid)[0].state_rows == 5  # a duplicate changes nothing
    assert store.ack(JOB.name, 999, h) is AckResult.UNKNOWN
    assert store.ack(JOB.name, cid, StateHandle("nope", 0)) is AckResult.UNKNOWN
    assert store.fail(JOB.name, cid, FailureReason.TASK_DECLINED, "declined by test")
    assert store.ack(JOB.name, cid, StateHandle("count", 1)) is AckResult.DISCARDED


def test_fail_is_recorded_with_reason_and_only_once(store: CheckpointStore) -> None:
    cid = store.trigger(JOB.name, no_cut).checkpoint_id
    assert store.fail(JOB.name, cid, FailureReason.TASK_DECLINED, "boom")
    assert not store.fail(JOB.name, cid, FailureReason.TIMEOUT)
    ck = store.checkpoint(JOB.name, cid)
    assert (ck.status, ck.failure_reason, ck.failure_detail) == (CheckpointStatus.FAILED, "TASK_DECLINED", "boom")
    assert store.history(JOB.name)[0]["failure_reason"] == "TASK_DECLINED"


def test_timeout_expires_pending_checkpoints(store: CheckpointStore) -> None:
    cid = store.trigger(JOB.name, no_cut).checkpoint_id
    assert store.expire_timed_out(JOB.name, utcnow()) == []
    later = utcnow() + timedelta(milliseconds=JOB.policy.timeout_ms + 1)
    assert store.expire_timed_out(JOB.name, later) == [cid]
    assert store.checkpoint(JOB.name, cid).failure_reason == FailureReason.TIMEOUT


def test_policy_skips_triggers(store: CheckpointStore) -> None:
    with store.sessions.begin() as s:
        s.execute(text("UPDATE jobs SET max_concurrent_pending = 1, min_pause_ms = 0"))
    assert store.trigger(JOB.name, no_cut).decision is TriggerDecision.EXECUTE
    assert store.trigger(JOB.name, no_cut).decision is TriggerDecision.SKIP_TOO_MANY_PENDING
    with store.sessions.begin() as s:
        s.execute(text("UPDATE jobs SET max_concurrent_pending = 10, min_pause_ms = 3600000"))
    assert store.trigger(JOB.name, no_cut).decision is TriggerDecision.SKIP_MIN_PAUSE
    assert len(store.checkpoints(JOB.name)) == 1


def test_retention_subsumes_old_completed_checkpoints(store: CheckpointStore) -> None:
    for _ in range(5):
        ack_all(store, store.trigger(JOB.name, no_cut).checkpoint_id)
    assert store.subsume_beyond_retention(JOB.name) == [2, 1]
    statuses = [c.status for c in store.checkpoints(JOB.name)]
    assert statuses == ["SUBSUMED", "SUBSUMED", "COMPLETED", "COMPLETED", "COMPLETED"]


def test_consecutive_failures_ignore_disabled_snapshots(store: CheckpointStore) -> None:
    ack_all(store, store.trigger(JOB.name, no_cut).checkpoint_id)
    for reason in (FailureReason.TIMEOUT, FailureReason.SNAPSHOT_DISABLED, FailureReason.TASK_DECLINED):
        store.fail(JOB.name, store.trigger(JOB.name, no_cut).checkpoint_id, reason)
    assert store.consecutive_failures(JOB.name) == 2


def growing_cut(_session, checkpoint_id):
    return {"p0": 10 * checkpoint_id}, 0, 0


def test_sink_commits_in_order_and_never_for_failed(store: CheckpointStore) -> None:
    ids = [store.trigger(JOB.name, growing_cut).checkpoint_id for _ in range(3)]
    with store.sessions.begin() as s:
        for cid in ids:
            sinks.stage(s, JOB.name, "sink", cid, "/nonexistent/staged", None, 0)
    ack_all(store, ids[0])
    store.fail(JOB.name, ids[1], FailureReason.TASK_DECLINED)
    with store.sessions.begin() as s:
        committed, aborted = sinks.settle(s, JOB)
    assert (committed, aborted) == ([ids[0]], [ids[1]])
    ack_all(store, ids[2])
    with store.sessions.begin() as s:
        assert sinks.settle(s, JOB) == ([ids[2]], [])
    with store.engine.connect() as c:
        status = dict(c.execute(text("SELECT checkpoint_id, status FROM sink_transactions")).all())
    assert status == {1: SinkTxnStatus.COMMITTED, 2: SinkTxnStatus.ABORTED, 3: SinkTxnStatus.COMMITTED}
    with store.engine.connect() as c:
        marks = c.execute(text("SELECT partition, \"offset\", checkpoint_id FROM sink_watermarks")).all()
    assert marks == [("p0", 30, 3)]  # the high-water mark moved with the output, in its transaction


def test_a_replay_at_or_below_the_high_water_marks_is_deduplicated(store: CheckpointStore) -> None:
    first = store.trigger(JOB.name, growing_cut).checkpoint_id
    replay = store.trigger(JOB.name, lambda s, cid: ({"p0": 10}, 0, 0)).checkpoint_id  # same records as `first`
    with store.sessions.begin() as s:
        for cid in (first, replay):
            sinks.stage(s, JOB.name, "sink", cid, "/nonexistent/staged", None, 0)
    ack_all(store, first)
    ack_all(store, replay)
    with store.sessions.begin() as s:
        assert sinks.settle(s, JOB) == ([first, replay], [])
    with store.engine.connect() as c:
        status = dict(c.execute(text("SELECT checkpoint_id, status FROM sink_transactions")).all())
    assert status == {first: SinkTxnStatus.COMMITTED, replay: SinkTxnStatus.DEDUPLICATED}


def test_snapshot_history_view_has_the_public_columns(store: CheckpointStore) -> None:
    cid = store.trigger(JOB.name, no_cut).checkpoint_id
    store.ack_many(JOB.name, cid, [StateHandle(op, i, state_bytes=10) for op, i in TASKS])
    row = store.history(JOB.name)[0]
    assert list(row) == [
        "job", "checkpoint_id", "status", "triggered_at", "completed_at", "duration_ms",
        "state_bytes", "acked_tasks", "total_tasks", "failure_reason",
    ]
    assert (row["status"], row["acked_tasks"], row["total_tasks"], row["state_bytes"]) == (
        "COMPLETED", len(TASKS), len(TASKS), 10 * len(TASKS)
    )
    assert row["duration_ms"] >= 0


def test_twenty_concurrent_triggers_on_postgresql_get_distinct_increasing_ids(pg_url: str) -> None:
    store = CheckpointStore(make_engine(pg_url))
    store.register_job(JOB)
    barrier = threading.Barrier(20)
    results: list[tuple[int, int]] = []
    lock = threading.Lock()

    def slow_cut(_session, cid):
        return {"p0": cid}, 0, 0

    def inject() -> None:
        own = CheckpointStore(make_engine(pg_url))  # its own connection pool, like a separate process
        barrier.wait()
        outcome = own.trigger(JOB.name, slow_cut)
        with lock:
            results.append((outcome.checkpoint_id, own.cut(JOB.name, outcome.checkpoint_id)["p0"]))
        own.engine.dispose()

    threads = [threading.Thread(target=inject) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = sorted(cid for cid, _ in results)
    assert ids == list(range(1, 21))
    assert all(cid == cut for cid, cut in results)
    triggered = [c.triggered_at for c in sorted(store.checkpoints(JOB.name), key=lambda c: c.checkpoint_id)]
    assert len(triggered) == 20
