"""Rewinds and replays of replays in the catalog (issue 10, item 5), on both backends, without Spark:
what a recovery's reset leaves in the sink, given the restored checkpoint's state."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

import absreplay.api as abs
from coordinator.checkpoints import back_edge_logs, manifests, recovery, state_files
from coordinator.sinks import transactions as sinks
from absreplay_examples.definitions import connected_components
from coordinator.modes import RecoveryKind, RecoveryMode
from tests.helpers import make_workspace, stage_counts


def txn_status(ws) -> dict[int, str]:
    with ws.store.engine.connect() as c:
        return dict(c.execute(text("SELECT checkpoint_id, status FROM sink_transactions")).all())


def reset(ws, restored: int, kind: RecoveryKind, state_rows: pa.Table | None = None) -> recovery.ResetOutcome:
    rid = recovery.start(ws.store, ws.job.name, kind, RecoveryMode.FULL, restored)
    rows = None if state_rows is None else {ws.job.sinks[0].name: state_rows}
    return recovery.reset_after(ws.store, ws.job, restored, rid, kind, rows)


def test_rewind_puts_back_rows_that_superseded_checkpoints_stamped_with_lower_ids(tmp_path, catalog_url) -> None:
    """1: a=1; 2: a=2 b=1; 3: a=3 c=1, all committed. Recovering to 1 replays 2 and 3 as 4 and 5,
    both deduplicated: the sink keeps rows stamped 2 and 3. A rewind to 4 (the state of epoch 2)
    must leave the sink at {a: 2, b: 1}; deleting only rows stamped after 4 kept a=3 and c=1."""
    ws = make_workspace(tmp_path, catalog_url)
    epochs = {1: {"a": 1}, 2: {"a": 2, "b": 1}, 3: {"a": 3, "c": 1}}
    for cid, counts in epochs.items():
        ws.store.trigger(ws.job.name, lambda s, c, end=10 * cid: ({"p0": end}, 0, 0))
        stage_counts(ws, cid, counts, cid - 1 or None)
        ws.complete(cid)
    ws.coordinator.finalize()
    assert ws.committed() == {"a": 3, "b": 1, "c": 1}
    out = reset(ws, 1, RecoveryKind.RECOVER)
    assert out.replays == {4: 2, 5: 3}
    for cid, of in out.replays.items():
        stage_counts(ws, cid, epochs[of], cid - 1)
        ws.complete(cid)
    ws.coordinator.finalize()
    assert txn_status(ws)[4] == txn_status(ws)[5] == "DEDUPLICATED"
    state_at_4 = pa.table({"word": ["a", "b"], "count": pa.array([2, 1], pa.int64()),
                           "updated": pa.array([4, 4], pa.int64())})
    out = reset(ws, 4, RecoveryKind.REWIND, state_at_4)
    assert ws.committed() == {"a": 2, "b": 1}
    assert out.reverted_rows == 2  # c deleted, a rewritten
    with ws.store.engine.connect() as c:
        marks = c.execute(text('SELECT partition, "offset", checkpoint_id FROM sink_watermarks')).all()
    assert marks == [("p0", 20, 4)]


def appended_words(url: str | None) -> abs.Job:
    """Every word record appended as it comes (no keyed operator before the sink): an append sink table, in
    the catalog database (``url`` None) or in another one; beside it the count per word a job must have."""
    job = abs.Job("appended_words", parallelism=1)
    words = job.source("words", abs.json_lines({"word": str, "n": int}))
    words.sink("out", abs.SqlTable("appended_words", url=url), columns={"word": str, "n": int})
    words.key_by("word", str).aggregate("per_word", n=abs.count()).sink("per_word_out", abs.SqlTable("per_word"))
    return job


def stage_appended(ws, checkpoint_id: int, records: list[tuple[str, int]]) -> None:
    """What a run stages for an append sink fed by no state, without Spark (``spark_jobs.run.snapshot``'s
    ``_stage_output``): the epoch's rows stamped with the checkpoint, sealed, and the sink transaction."""
    (sink,) = [s for s in ws.job.sinks if s.name == "out"]
    uri = state_files.operator_dir(ws.settings.state_uri, ws.job.name, checkpoint_id, sink.name)
    out = Path(uri.removeprefix("file://"))
    out.mkdir(parents=True)
    pq.write_table(pa.table({"word": [w for w, _ in records], "n": pa.array([n for _, n in records], pa.int64()),
                             "updated": pa.array([checkpoint_id] * len(records), pa.int64())}), out / "part-0.parquet")
    manifest = manifests.seal(uri, f"{state_files.spark_uri(ws.settings.state_uri)}/{ws.job.name}")
    with ws.store.sessions.begin() as s:
        sinks.stage(s, ws.job.name, sink.name, checkpoint_id, uri, None, len(records), manifest)


@pytest.mark.parametrize("where", ["catalog", "elsewhere"])
def test_rewind_to_a_replay_drops_the_later_epochs_appended_rows_stamped_with_lower_ids(tmp_path, catalog_url,
                                                                                      where) -> None:
    """An append sink, epochs 1..3 committed. Recovering to 1 replays 2 and 3 as 4 and 5, both deduplicated:
    epoch 3's rows stay stamped 3. A rewind to 4 (the replay of epoch 2) must drop them, since epoch 3 comes
    after epoch 2 whatever the ids; deleting only rows stamped after 4 kept them, and the replay of epoch 3
    appended them a second time."""
    url = None if where == "catalog" else f"sqlite:///{tmp_path / 'elsewhere.db'}"
    ws = make_workspace(tmp_path, catalog_url, appended_words(url).definition())
    (target,) = [s.target(catalog_url) for s in ws.job.sinks if s.name == "out"]
    epochs = {1: [("a", 1)], 2: [("b", 2), ("a", 2)], 3: [("c", 3), ("a", 3)]}
    for cid, records in epochs.items():
        ws.store.trigger(ws.job.name, lambda s, c, end=10 * cid: ({"p0": end}, 0, 0))
        stage_appended(ws, cid, records)
        ws.complete(cid)
    ws.coordinator.finalize()
    out = reset(ws, 1, RecoveryKind.RECOVER)
    assert out.replays == {4: 2, 5: 3}
    for cid, of in out.replays.items():
        stage_appended(ws, cid, epochs[of])
        ws.complete(cid)
    ws.coordinator.finalize()
    assert txn_status(ws)[4] == txn_status(ws)[5] == "DEDUPLICATED"
    # what the confirmation page says the rewind replaces: epoch 3's output, committed under 3
    (later,) = recovery.preview(ws.store, ws.job.name, RecoveryKind.REWIND, RecoveryMode.FULL, 4).later_output
    assert (later.checkpoints, later.rows) == ([3], 2)
    out = reset(ws, 4, RecoveryKind.REWIND)
    assert sorted(target.read().to_pylist(), key=repr) == sorted(
        ({"word": w, "n": n} for cid in (1, 2) for w, n in epochs[cid]), key=repr)
    assert out.replays == {6: 5} and out.reverted_rows == 2
    stage_appended(ws, 6, epochs[3])
    ws.complete(6)
    ws.coordinator.finalize()
    assert txn_status(ws)[6] == "COMMITTED"
    assert sorted(target.read().to_pylist(), key=repr) == sorted(
        ({"word": w, "n": n} for records in epochs.values() for w, n in records), key=repr)  # each row once


def test_a_replay_of_a_replay_is_deduplicated_in_a_job_with_a_loop(tmp_path, catalog_url) -> None:
    """connected_components: the loop position of a replay of a replay is the original epoch's, so
    a second recovery to the same checkpoint re-commits nothing (older labels never overwrite newer)."""
    ws = make_workspace(tmp_path, catalog_url, connected_components())
    loop = back_edge_logs.BackEdgeLogHandle(ws.job.loop_tail, 0, None, 0)

    def finish(cid: int) -> None:
        with ws.store.sessions.begin() as s:
            sinks.stage(s, ws.job.name, ws.job.sinks[0].name, cid, "/nonexistent/staged", cid - 1 or None, 0)
            back_edge_logs.record(s, ws.job.name, cid, [loop])
        ws.complete(cid)

    for cid in (1, 2, 3):
        ws.store.trigger(ws.job.name, lambda s, c, end=10 * cid: ({"p0": end}, 0, 0))
        finish(cid)
    ws.coordinator.finalize()
    first = reset(ws, 1, RecoveryKind.RECOVER)
    for cid in first.replays:
        finish(cid)
    ws.coordinator.finalize()
    second = reset(ws, 1, RecoveryKind.RECOVER)
    assert second.replays == {6: 4, 7: 5}
    for cid in second.replays:
        finish(cid)
    ws.coordinator.finalize()
    status = txn_status(ws)
    assert [status[c] for c in (4, 5, 6, 7)] == ["DEDUPLICATED"] * 4
    with ws.store.sessions() as s:
        assert back_edge_logs.loop_position(s, ws.job.name, 7) == {back_edge_logs.LOOP_PARTITION: 3}


def test_transactions_settled_together_are_written_once_with_each_rows_own_checkpoint(tmp_path, catalog_url,
                                                                                      monkeypatch) -> None:
    """A catch-up's finalize settles several transactions of a sink table in the catalog at once: one
    upsert of each key's latest row (not one per checkpoint), stamped with the checkpoint that wrote
    it; every transaction COMMITTED with its own row count; the marks and the commit record at the last."""
    from coordinator.sinks.sql_table import SqlTableTarget

    ws = make_workspace(tmp_path, catalog_url)
    epochs = {1: {"a": 1, "b": 1}, 2: {"a": 2}, 3: {"a": 3, "c": 1}}
    for cid, counts in epochs.items():
        ws.store.trigger(ws.job.name, lambda s, c, end=10 * cid: ({"p0": end}, 0, 0))
        stage_counts(ws, cid, counts, cid - 1 or None)
        ws.complete(cid)
    upserts = []
    real = SqlTableTarget.upsert
    monkeypatch.setattr(SqlTableTarget, "upsert", lambda self, conn, cid, rows: (
        upserts.append(rows.num_rows), real(self, conn, cid, rows))[1])
    assert ws.coordinator.finalize().committed == [1, 2, 3]
    assert upserts == [3]  # a, b, c once
    with ws.store.engine.connect() as c:
        stamped = dict(c.execute(text("SELECT word, checkpoint_id FROM wordcount_counts")).all())
        rows = dict(c.execute(text("SELECT checkpoint_id, rows FROM sink_transactions")).all())
        marks = c.execute(text('SELECT partition, "offset", checkpoint_id FROM sink_watermarks')).all()
        record = c.execute(text("SELECT checkpoint_id FROM absreplay_sink_commits")).scalar()
    assert ws.committed() == {"a": 3, "b": 1, "c": 1}
    assert stamped == {"a": 3, "b": 1, "c": 3}
    assert rows == {1: 2, 2: 1, 3: 2} and txn_status(ws) == dict.fromkeys(epochs, "COMMITTED")
    assert marks == [("p0", 30, 3)] and record == 3
