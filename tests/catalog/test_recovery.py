"""Recovery to an older checkpoint, rewind, partial recovery, corrupt files and --fallback, on
PostgreSQL with real Spark (the shared session: the recovery runs in-process, exactly the
code `absreplay recover` runs inside its application)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from coordinator.checkpoints import recovery
from coordinator.checkpoints.lifecycle import CheckpointStatus
from coordinator.modes import RecoveryKind, RecoveryMode, RecoveryRequest
from coordinator.errors import CheckpointNotFoundError, StateIntegrityError, UsageError
from tests.helpers import cli, crash, make_workspace

pytestmark = pytest.mark.spark


def cycles(ws, spark, n: int) -> None:
    for b in range(n):
        ws.cycle(spark, b)


def recover(ws, spark, kind=RecoveryKind.RECOVER, mode=RecoveryMode.FULL, checkpoint=None, fallback=False):
    from spark_jobs.recover import run_recovery
    from coordinator.modes import SnapshotMode

    request = RecoveryRequest(kind, mode, checkpoint, fallback)
    return run_recovery(spark, ws.store, ws.job, ws.settings, request, SnapshotMode.ASYNC)


def sink_rows(ws) -> dict[str, tuple[int, int]]:
    with ws.store.engine.connect() as c:
        return {w: (n, cid) for w, n, cid in c.execute(text("SELECT word, count, checkpoint_id FROM wordcount_counts"))}


def statuses(ws) -> dict[int, str]:
    return {c.checkpoint_id: c.status for c in ws.store.checkpoints(ws.job.name)}


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_recover_from_an_older_checkpoint_supersedes_later_ones_and_dedupes_the_sink(backend, request, tmp_path, spark):
    ws = make_workspace(tmp_path, request.getfixturevalue("pg_url" if backend == "postgresql" else "sqlite_url"))
    cycles(ws, spark, 3)  # checkpoints 1..3 completed and committed
    before = sink_rows(ws)
    ws.land(3)
    ws.coordinator.inject()  # 4: pending, never processed
    recover(ws, spark, checkpoint=2)
    st = statuses(ws)
    assert st[3] == CheckpointStatus.SUPERSEDED and st[4] == CheckpointStatus.SUPERSEDED
    replays = {c.checkpoint_id: c.replay_of for c in ws.store.checkpoints(ws.job.name) if c.replay_of}
    assert replays == {5: 3, 6: 4}
    assert st[5] == st[6] == CheckpointStatus.COMPLETED
    # the replay of 3 was already in the sink: deduplicated, nothing written twice
    with ws.store.engine.connect() as c:
        txns = dict(c.execute(text("SELECT checkpoint_id, status FROM sink_transactions WHERE checkpoint_id >= 5")).all())
    assert txns == {5: "DEDUPLICATED", 6: "COMMITTED"}
    after = sink_rows(ws)
    assert {w: v for w, v in after.items() if v[1] <= 3} == {w: v for w, v in before.items() if w in after and after[w][1] <= 3}
    assert ws.committed() == ws.expected_at(6) == ws.expected_at(4)
    (row,) = recovery.history(ws.store, ws.job.name)
    assert (row["kind"], row["from_checkpoint_id"], row["to_checkpoint_id"], row["superseded"], row["result"]) == (
        "recover", 2, 6, 2, "SUCCEEDED")


@pytest.mark.sink_unchecked("the rewind runs a fixed operator: the sink is not a recount of the original job")
def test_rewind_replaces_later_sink_output_instead_of_adding_to_it(tmp_path, pg_url, spark, monkeypatch):
    ws = make_workspace(tmp_path, pg_url)
    cycles(ws, spark, 4)
    assert ws.committed() == ws.expected_at(4)
    # "a bug fix in an operator": from now on the operator drops the word w1
    tokenize = ws.job.spec.node("tokenize")
    original = tokenize.fn

    def fixed(records):
        words = original(records)
        return words.where(words.word != "w1")

    monkeypatch.setattr(tokenize, "fn", fixed)
    at_2 = ws.expected_at(2)
    recover(ws, spark, kind=RecoveryKind.REWIND, checkpoint=2)
    st = statuses(ws)
    assert [st[i] for i in (3, 4)] == [CheckpointStatus.SUPERSEDED] * 2
    assert [st[i] for i in (5, 6)] == [CheckpointStatus.COMPLETED] * 2
    expected = ws.expected_at(4)
    # w1 keeps exactly its count as of checkpoint 2; every other word is as before: replaced, not added
    expected["w1"] = at_2["w1"]
    assert ws.committed() == expected
    with ws.store.engine.connect() as c:
        assert c.execute(text("SELECT checkpoint_id FROM wordcount_counts WHERE word = 'w1'")).scalar() <= 2
        audit = c.execute(text(
            "SELECT checkpoint_id, status FROM snapshot_history WHERE job = 'wordcount' ORDER BY checkpoint_id"
        )).all()
    assert [s for _, s in audit][-4:] == ["SUPERSEDED", "SUPERSEDED", "COMPLETED", "COMPLETED"]


def test_partial_recovery_keeps_the_state_of_tasks_that_acked(tmp_path, pg_url, spark, monkeypatch):
    ws = make_workspace(tmp_path, pg_url)
    cycles(ws, spark, 2)
    ws.land(2)
    ws.coordinator.inject()  # 3
    # subtask 0's tasks ack checkpoint 3, then the run dies (as `snapshot.after_ack@3/1=kill` does)
    from spark_jobs.run import snapshot

    def ack_first_only(self, checkpoint_id, handles, logs=None):  # the process dies before the second group acks
        self.store.ack_many(self.job.name, checkpoint_id, [h for h in handles if h.subtask == 0])

    monkeypatch.setattr(snapshot.SnapshotWriter, "_ack", ack_first_only)
    ws.run_epochs(spark)
    monkeypatch.undo()
    kept = {(a.operator, a.subtask): a for a in ws.store.acks(ws.job.name, 3)}
    assert {sub for _, sub in kept} == {0}
    recover(ws, spark, mode=RecoveryMode.PARTIAL)
    after = {(a.operator, a.subtask): a for a in ws.store.acks(ws.job.name, 3)}
    # subtask 0 did not run again: its acks (and files) are the ones from before the failure
    assert all(after[k].acked_at == kept[k].acked_at for k in kept)
    assert {sub for _, sub in after} == {0, 1}
    assert statuses(ws)[3] == CheckpointStatus.COMPLETED
    assert ws.committed() == ws.expected_at(3)
    (row,) = recovery.history(ws.store, ws.job.name)
    assert row["mode"] == "partial" and "subtasks [0] keep their state" in row["detail"]


def test_partial_recovery_from_an_older_checkpoint_is_refused(tmp_path, pg_url, spark):
    ws = make_workspace(tmp_path, pg_url)
    cycles(ws, spark, 2)
    with pytest.raises(UsageError, match="needs --mode full"):
        recovery.validate(ws.store, "wordcount", RecoveryKind.RECOVER, RecoveryMode.PARTIAL, 1)


def test_a_checkpoint_subsumed_before_the_run_took_the_lease_is_a_refused_recovery(tmp_path, pg_url, spark):
    """The application checks the request once more under the lease: a checkpoint a finalize subsumed
    since is refused there too, nothing changed, and the row says so for the run that asked."""
    from spark_jobs.recover import run_recovery
    from coordinator.modes import SnapshotMode

    ws = make_workspace(tmp_path, pg_url)
    for checkpoint_id in range(1, 5):
        ws.coordinator.inject()
        ws.complete(checkpoint_id)
    assert ws.coordinator.finalize().subsumed == [1]
    before = ws.store.history(ws.job.name)
    request = RecoveryRequest(RecoveryKind.REWIND, RecoveryMode.FULL, 1, airflow_run_id="manual__9")
    with pytest.raises(CheckpointNotFoundError, match="is SUBSUMED"):
        run_recovery(spark, ws.store, ws.job, ws.settings, request, SnapshotMode.ASYNC)
    assert ws.store.history(ws.job.name) == before
    (row,) = recovery.history(ws.store, ws.job.name)
    assert (row["kind"], row["result"], row["requested_checkpoint_id"], row["airflow_run_id"]) == (
        "rewind", "REFUSED", 1, "manual__9")
    assert row["detail"].startswith("checkpoint 1 of job 'wordcount' is SUBSUMED") and row["finished_at"]


def corrupt_latest(ws) -> str:
    latest = ws.store.latest_completed(ws.job.name).checkpoint_id
    ack = next(a for a in ws.store.acks(ws.job.name, latest) if a.operator == "count" and a.state_uri)
    path = Path(ack.state_uri.removeprefix("file:"))
    victim = next(path.glob("*.parquet"))
    victim.unlink()
    for crc in path.glob(f".{victim.name}.crc"):
        crc.unlink()
    return str(victim)


@pytest.fixture
def corrupt(tmp_path, pg_url, spark):
    """Checkpoints 1..3 completed, 4 pending, a state file of 3 deleted."""
    ws = make_workspace(tmp_path, pg_url)
    cycles(ws, spark, 3)
    ws.land(3)
    ws.coordinator.inject()
    corrupt_latest(ws)
    return ws


def test_a_corrupt_file_stops_the_recovery_and_nothing_is_overwritten(corrupt, spark):
    ws = corrupt
    before_ck, before_sink = statuses(ws), sink_rows(ws)
    with pytest.raises(StateIntegrityError, match="checkpoint 3"):
        recover(ws, spark)
    assert statuses(ws) == before_ck and sink_rows(ws) == before_sink
    (row,) = recovery.history(ws.store, ws.job.name)
    assert row["result"] == "FAILED" and "StateIntegrityError" in row["detail"]


def test_fallback_moves_to_the_previous_completed_checkpoint_and_says_so(corrupt, spark):
    ws = corrupt
    recover(ws, spark, fallback=True)
    (row,) = recovery.history(ws.store, ws.job.name)
    assert row["result"] == "SUCCEEDED" and row["requested_checkpoint_id"] is None
    assert row["from_checkpoint_id"] == 2 and "--fallback: recovering from checkpoint 2" in row["detail"]
    assert statuses(ws)[3] == CheckpointStatus.SUPERSEDED
    latest = ws.store.latest_completed(ws.job.name).checkpoint_id
    assert ws.committed() == ws.expected_at(latest) == ws.expected_at(4)


def test_recover_before_any_completed_checkpoint_starts_from_the_empty_state(tmp_path, pg_url, spark):
    """Killed in epoch 1: nothing completed. `recover` (what a runbook or the recover DAG runs after an
    alert, without knowing how far the job got) restarts every task from the start of the sources."""
    ws = make_workspace(tmp_path, pg_url)
    for b in range(2):
        ws.land(b)
        ws.coordinator.inject()
    crash(ws, spark, "epoch.compute@1", "process", "wordcount")
    assert ws.store.latest_completed(ws.job.name) is None
    r = cli(ws, "recover", "wordcount", spark=spark)
    assert r.code == 0, r.out + r.err
    assert "recover from the start of the sources (full): no checkpoint has completed yet" in r.out
    assert "every task starts from the empty state at the start of the sources" in r.out
    assert statuses(ws) == {1: CheckpointStatus.COMPLETED, 2: CheckpointStatus.COMPLETED}
    assert ws.committed() == ws.expected_at(2)
    (row,) = recovery.history(ws.store, ws.job.name)
    assert (row["kind"], row["from_checkpoint_id"], row["to_checkpoint_id"], row["result"]) == (
        "recover", None, 2, "SUCCEEDED")
    assert cli(ws, "rewind", "wordcount", "--to", "7").code == 2  # no such checkpoint: bad input