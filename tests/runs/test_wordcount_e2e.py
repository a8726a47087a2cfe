"""End to end with real Spark: segments land between barriers; after every completed
checkpoint the sink equals an independent recount of exactly the records before it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

from coordinator.catalog.db import upgrade
from coordinator.errors import StateIntegrityError
from absreplay_examples.definitions import wordcount
from coordinator.checkpoints.lifecycle import CheckpointStatus, FailureReason
from coordinator.checkpoints.policy import CheckpointPolicy
from tests.helpers import make_workspace

pytestmark = pytest.mark.spark


def assert_history_complete(ws) -> None:
    rows = ws.store.history(ws.job.name)
    assert rows, "no checkpoints"
    for r in rows:
        assert r["status"] in ("COMPLETED", "SUBSUMED"), r
        assert r["acked_tasks"] == r["total_tasks"] == 8, r


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_cycles_are_exact_after_every_checkpoint(backend, request, tmp_path, spark) -> None:
    ws = make_workspace(tmp_path, request.getfixturevalue("pg_url" if backend == "postgresql" else "sqlite_url"))
    batch = 0
    for cycle in range(5):
        # cycles 1 and 3 land two batches with a barrier each: the run catches up two epochs
        for _ in range(2 if cycle in (1, 3) else 1):
            ws.land(batch)
            batch += 1
            assert ws.coordinator.inject().checkpoint_id is not None
        report = ws.run_epochs(spark)
        assert not report.failed
        ws.coordinator.finalize()
        latest = ws.store.latest_completed(ws.job.name)
        assert latest.checkpoint_id == batch
        assert ws.committed() == ws.expected_at(latest.checkpoint_id)
    assert_history_complete(ws)
    statuses = [c.status for c in ws.store.checkpoints(ws.job.name)]
    assert statuses.count(CheckpointStatus.COMPLETED) == ws.job.policy.retained
    # each run's first store tasks say how they found their stores, and where they ran: the first built them
    # empty, every later one found them where the last one left them
    events = {(a.checkpoint_id, a.subtask): (a.store_event, a.store_location) for a in ws.store.all_acks(ws.job.name)
              if a.operator == "count" and a.store_event}
    assert {c for c, _ in events} == {1, 2, 4, 5, 7}, events  # cycles 1 and 3 ran two epochs at once
    assert {e for (c, _), (e, _) in events.items() if c > 1} == {"hit"}, events
    assert all(where and where.startswith("executor_") for _, where in events.values()), events
    assert ws.store.store_locations(ws.job.name) == {"count": {i: events[7, i][1] for i in range(2)}}


def test_snapshot_modes_store_the_same_state(tmp_path, sqlite_url, spark) -> None:
    checksums = {}
    for mode in ("async", "sync"):
        url = f"sqlite:///{tmp_path / mode}.db"
        upgrade(url)
        ws = make_workspace(tmp_path / mode, url)
        for b in range(3):
            ws.land(b)
            ws.coordinator.inject()
        ws.run_epochs(spark, mode)
        ws.coordinator.finalize()
        assert ws.committed() == ws.expected_latest()
        checksums[mode] = {
            (a.checkpoint_id, a.subtask): (a.state_rows, a.checksum)
            for c in (1, 2, 3) for a in ws.store.acks(ws.job.name, c) if a.operator == "count"
        }
        sync_ms = [a.sync_ms for a in ws.store.acks(ws.job.name, 3) if a.operator == "count"]
        async_ms = [a.async_ms for a in ws.store.acks(ws.job.name, 3) if a.operator == "count"]
        if mode == "sync":
            assert min(sync_ms) > 0 and max(async_ms) == 0
        else:
            assert min(async_ms) > 0
    assert checksums["async"] == checksums["sync"]


def test_no_snapshot_mode_writes_the_sink_but_no_checkpoint(tmp_path, sqlite_url, spark) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    ws.land(0)
    ws.coordinator.inject()
    ws.run_epochs(spark, "none")
    ck = ws.store.checkpoint(ws.job.name, 1)
    assert (ck.status, ck.failure_reason) == (CheckpointStatus.FAILED, FailureReason.SNAPSHOT_DISABLED)
    assert ws.committed() == ws.expected_at(1)
    assert ws.store.acks(ws.job.name, 1) == []
    ws.coordinator.finalize()  # a disabled snapshot is not a failure of the job


def test_incremental_chain_restores_and_detects_corruption(tmp_path, pg_url, spark) -> None:
    job = wordcount()
    job = type(job)(**{**job.__dict__, "policy": CheckpointPolicy(full_snapshot_every=4, retained=5)})
    ws = make_workspace(tmp_path, pg_url, job)
    ws.land(0, lines=2000, vocab=3000)  # many keys first; later epochs touch few of them
    ws.coordinator.inject()
    for b in range(1, 5):
        ws.run_epochs(spark)
        ws.coordinator.finalize()
        assert ws.committed() == ws.expected_latest()
        ws.land(b, lines=5, vocab=3000)
        ws.coordinator.inject()
    ws.run_epochs(spark)
    ws.coordinator.finalize()
    assert ws.committed() == ws.expected_latest()
    bases = {a.checkpoint_id: a.base_checkpoint_id for a in ws.store.all_acks(ws.job.name) if a.operator == "count"}
    # epoch 1 changed every key, so 2 is full too; later epochs change few keys: deltas
    assert bases[1] is None and bases[3] == 2 and bases[4] == 3, bases
    # tamper with a state file the next restore reads: same schema, one count changed
    latest = ws.store.latest_completed(ws.job.name).checkpoint_id
    link = next(a for a in ws.store.acks(ws.job.name, latest) if a.operator == "count" and a.state_uri)
    part = next(Path(link.state_uri.removeprefix("file://")).glob("*.parquet"))
    table = pq.read_table(part)
    counts = table.column("count").to_pylist()
    counts[0] += 1
    pq.write_table(table.set_column(table.schema.get_field_index("count"), "count", pa.array(counts)), part)
    ws.land(9, lines=5, vocab=3000)
    ws.coordinator.inject()
    # the local stores hold checkpoint `latest` and a run would start from them without reading a file:
    # without them (a new machine, a lost disk) the restore reads the files, and
    shutil.rmtree(ws.stores)
    # the stores' tasks wrote that file (store_backend.write_full): no Hadoop .crc side file to notice, but
    # the sha256 its manifest recorded before the ack does
    assert not part.with_name(f".{part.name}.crc").exists()
    with pytest.raises(StateIntegrityError, match=rf"{link.state_uri} of checkpoint {latest} is corrupt"):
        ws.run_epochs(spark)
    # a file cut short: the store's task that loads it names it, by the bytes its manifest lists
    part.write_bytes(part.read_bytes()[:200])
    with pytest.raises(StateIntegrityError, match=rf"{link.state_uri} of checkpoint {latest} is corrupt: .* has 200 "
                                                  "bytes"):
        ws.run_epochs(spark)
    assert ws.committed() == ws.expected_at(latest)  # nothing was overwritten


def test_dead_letters_are_counted_not_processed(tmp_path, sqlite_url, spark) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    part = ws.input_dir / "p0"
    part.mkdir(parents=True)
    (part / "seg-000001.txt").write_bytes("Hello, world!\nhello again\n".encode() + b"\xff\xfe broken words\nworld\n")
    ws.coordinator.inject()
    ws.run_epochs(spark)
    ws.coordinator.finalize()
    assert ws.committed() == {"hello": 2, "world": 2, "again": 1}
    with ws.store.engine.connect() as c:
        assert c.execute(text("SELECT dead_letters FROM checkpoint_stats WHERE checkpoint_id = 1")).scalar_one() == 1


def test_a_key_longer_than_any_varchar_reaches_the_sink_on_postgresql(tmp_path, pg_url, spark) -> None:
    """SQLite stores a 600-character word; PostgreSQL must too, or every later commit of the job fails."""
    ws = make_workspace(tmp_path, pg_url)
    long_word = "x" * 600 + "y" * 1400
    part = ws.input_dir / "p0"
    part.mkdir(parents=True)
    for n, content in enumerate([f"short {long_word}\n{long_word}\n", f"{long_word} again\n"], 1):
        (part / f"seg-{n:06d}.txt").write_text(content)
        ws.coordinator.inject()
        ws.run_epochs(spark)
        ws.coordinator.finalize()
        assert ws.committed() == ws.expected_latest()
    assert ws.committed()[long_word] == 3
    assert [c.status for c in ws.store.checkpoints(ws.job.name)] == ["COMPLETED", "COMPLETED"]


def test_a_commit_that_fails_is_one_named_line_and_nothing_is_written(tmp_path, pg_url, spark) -> None:
    """A staged file of a completed checkpoint cut to zero bytes: `finalize` says which checkpoint,
    why and what to do, in one line (exit 1), writes nothing, and commits once the file is back."""
    from tests.helpers import cli

    ws = make_workspace(tmp_path, pg_url)
    ws.cycle(spark, 0)
    ws.land(1)
    ws.coordinator.inject()
    ws.run_epochs(spark)  # checkpoint 2 completed, its output staged, not committed
    before = ws.committed()
    txn_dir = Path(next(a for a in ws.store.acks(ws.job.name, 2) if a.operator == "count" and a.state_uri)
                   .state_uri.removeprefix("file://"))
    victim = next(txn_dir.glob("*.parquet"))
    content = victim.read_bytes()
    victim.write_bytes(b"")
    r = cli(ws, "finalize", "wordcount")
    lines = r.err.strip().splitlines()
    assert r.code == 1 and len(lines) == 1, r.out + r.err
    assert "staged output of checkpoint 2 of job 'wordcount' does not match its ack" in lines[0]
    assert f"{victim.name} has 0 bytes" in lines[0] and "absreplay recover wordcount --checkpoint 1" in lines[0]
    assert ws.committed() == before
    victim.write_bytes(content)
    assert cli(ws, "finalize", "wordcount").code == 0
    assert ws.committed() == ws.expected_at(2)


def test_a_checkpoint_failed_while_its_snapshot_is_written_is_never_a_base(tmp_path, pg_url, spark, monkeypatch):
    """Checkpoint 2 expires (as a finalize beside the run would) just before its acks land: they are
    DISCARDED. The next snapshot must not be a delta on 2: it is a delta on 1 holding epochs 2 and 3,
    so the sink and a restore of 3 are exact. A chain whose base has no ack is refused, by name."""
    from spark_jobs.run.runner import EpochRunner
    from spark_jobs.run.snapshot import SnapshotWriter

    job = wordcount()
    job = type(job)(**{**job.__dict__, "policy": CheckpointPolicy(full_snapshot_every=10, retained=5)})
    ws = make_workspace(tmp_path, pg_url, job)
    ws.land(0, lines=2000, vocab=3000)
    ws.coordinator.inject()
    ws.run_epochs(spark)
    ws.coordinator.finalize()
    for b in (1, 2):
        ws.land(b, lines=20, vocab=3000)
        ws.coordinator.inject()  # 2 and 3: one run takes both, 3 is a small delta after 2
    ack = SnapshotWriter._ack

    def expired_then_acked(self, checkpoint_id, handles, logs=None):
        if checkpoint_id == 2:
            self.store.fail(self.job.name, 2, FailureReason.TIMEOUT, "expired by a finalize beside the run")
        return ack(self, checkpoint_id, handles, logs)

    monkeypatch.setattr(SnapshotWriter, "_ack", expired_then_acked)
    report = ws.run_epochs(spark)
    monkeypatch.undo()
    assert [t.checkpoint_id for t in report.failed] == [2] and "acks ['DISCARDED']" in report.failed[0].error
    ws.coordinator.finalize()
    bases = {a.base_checkpoint_id for a in ws.store.acks(ws.job.name, 3) if a.operator == "count"}
    assert bases == {1}
    assert ws.committed() == ws.expected_at(3)
    runner = EpochRunner(spark, ws.store, ws.job, ws.settings.data_dir, ws.settings.state_uri)
    assert {r["word"]: r["count"] for r in runner.restore(3).state.collect()} == ws.expected_at(3)
    # a delta whose base lost its ack: refused by name, never loaded alone
    with ws.store.engine.begin() as c:
        c.execute(text("DELETE FROM task_acks WHERE job = 'wordcount' AND checkpoint_id = 1 AND subtask = 0"))
    with pytest.raises(StateIntegrityError, match="count subtask 0 at checkpoint 3 is a delta on checkpoint 1, "
                                                  "which has no ack of that subtask"):
        runner.restore(3)
