"""The Parquet directory and Delta table sink targets against the SinkTarget contract: idempotent
commits by checkpoint id, newest value per key, reverts to exactly a checkpoint's rows, schema checks,
and, for the Parquet directory, a crash at every file system step of a commit or revert.

The reference is a plain model (a dict per keyed sink, a list of rows per append sink) built
independently of the targets. No Spark, Airflow or database."""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.errors import SinkSchemaError
from coordinator.faults import ProcessCrash
from coordinator.sinks.base import SinkTarget
from coordinator.sinks.delta_table import DeltaTable, app_id
from coordinator.sinks.parquet_dir import ParquetDirectory

SCHEMA = pa.schema([("word", pa.string()), ("count", pa.int64())])
JOB, SINK = "wordcount", "counts"
KINDS = ["parquet", "delta"]


def make(kind: str, where: Path, key: tuple[str, ...] | None, schema: pa.Schema = SCHEMA) -> SinkTarget:
    if kind == "parquet":
        return ParquetDirectory(where / "sink", schema, key)
    return DeltaTable(str(where / "sink"), schema, key)


def rows(pairs: dict[str, int | None] | list[tuple[str, int | None]]) -> pa.Table:
    items = list(pairs.items()) if isinstance(pairs, dict) else list(pairs)
    return pa.table({"word": [w for w, _ in items], "count": [c for _, c in items]}, schema=SCHEMA)


def content(target: SinkTarget) -> dict | list:
    """What readers see: a dict for a keyed target (one row per key), a sorted list for an append one."""
    table = target.read()
    assert table.schema == SCHEMA
    pairs = list(zip(table.column("word").to_pylist(), table.column("count").to_pylist()))
    if target.key is None:
        return sorted(pairs, key=repr)
    assert len({w for w, _ in pairs}) == len(pairs), "one row per key"
    return dict(pairs)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def test_both_are_sink_targets(tmp_path: Path, kind: str) -> None:
    assert isinstance(make(kind, tmp_path, ("word",)), SinkTarget)


@pytest.mark.parametrize("key", [("word",), None])
def test_a_replayed_commit_writes_nothing(tmp_path: Path, kind: str, key: tuple[str, ...] | None) -> None:
    target = make(kind, tmp_path, key)
    target.prepare()
    assert target.committed_through(JOB, SINK) is None
    assert target.commit(JOB, SINK, 1, rows({"a": 1, "b": 2})) is True
    before = content(target)
    assert target.commit(JOB, SINK, 1, rows({"a": 10, "c": 30})) is False
    assert target.commit(JOB, SINK, 0, rows({"z": 0})) is False
    assert content(target) == before
    assert target.committed_through(JOB, SINK) == 1


@pytest.mark.parametrize("key", [("word",), None])
def test_an_empty_checkpoint_still_commits(tmp_path: Path, kind: str, key: tuple[str, ...] | None) -> None:
    target = make(kind, tmp_path, key)
    target.prepare()
    assert target.commit(JOB, SINK, 1, rows({"a": 1})) is True
    assert target.commit(JOB, SINK, 2, SCHEMA.empty_table()) is True
    assert target.committed_through(JOB, SINK) == 2
    assert content(target) == ({"a": 1} if key else [("a", 1)])
    assert target.commit(JOB, SINK, 2, rows({"a": 5})) is False


def test_revert_to_a_middle_checkpoint_then_the_next_commit_applies(tmp_path: Path, kind: str) -> None:
    target = make(kind, tmp_path, ("word",))
    target.prepare()
    batches = [{"a": 1, "b": 1}, {"a": 2, "c": 2}, {"b": 3, "d": 3}, {"a": 4, "e": 4}]
    model: dict[str, int] = {}
    at: dict[int, dict[str, int]] = {}
    for checkpoint_id, batch in enumerate(batches, start=1):
        assert target.commit(JOB, SINK, checkpoint_id, rows(batch))
        model |= batch
        at[checkpoint_id] = dict(model)
    assert target.revert(JOB, SINK, 2, rows(at[2]), {3, 4}) == len(at[2])
    assert content(target) == at[2] == {"a": 2, "b": 1, "c": 2}  # d and e are gone, b is back to 1
    assert target.committed_through(JOB, SINK) == 2
    # the rewind's replay commits checkpoint 3 again, with new output: applied, once
    assert target.commit(JOB, SINK, 3, rows({"c": 9})) is True
    assert target.commit(JOB, SINK, 3, rows({"c": 99})) is False
    assert content(target) == {"a": 2, "b": 1, "c": 9}
    assert target.committed_through(JOB, SINK) == 3


def test_append_commit_and_revert(tmp_path: Path, kind: str) -> None:
    target = make(kind, tmp_path, None)
    target.prepare()
    batches = [[("a", 1), ("a", 1)], [("b", 2)], [("a", 3), ("c", 3)]]
    for checkpoint_id, batch in enumerate(batches, start=1):
        assert target.commit(JOB, SINK, checkpoint_id, rows(batch))
    assert content(target) == sorted(batches[0] + batches[1] + batches[2], key=repr)
    assert target.revert(JOB, SINK, 1, SCHEMA.empty_table(), {2, 3}) == 3  # rows removed
    assert content(target) == batches[0]
    assert target.committed_through(JOB, SINK) == 1
    assert target.revert(JOB, SINK, 5, SCHEMA.empty_table(), set()) == 0  # nothing after 5: the record stays
    assert target.committed_through(JOB, SINK) == 1
    assert target.commit(JOB, SINK, 2, rows([("d", 4)])) is True
    assert content(target) == sorted([*batches[0], ("d", 4)], key=repr)


def test_append_revert_to_a_replay_drops_a_later_epoch_of_a_lower_id(tmp_path: Path, kind: str) -> None:
    """Epochs 1..3 committed as checkpoints 1..3; a recovery to 1 replays 2 and 3 as 4 and 5, both deduplicated
    (the target never sees them). A rewind to 4, the replay of epoch 2, drops epoch 3's rows, stamped 3: the
    checkpoints of later epochs are 3 and 5. Dropping only ids above 4 kept them, and epoch 3's replay (6)
    appended them again."""
    target = make(kind, tmp_path, None)
    target.prepare()
    batches = {1: [("a", 1)], 2: [("b", 2), ("a", 2)], 3: [("c", 3), ("a", 3)]}
    for checkpoint_id, batch in batches.items():
        assert target.commit(JOB, SINK, checkpoint_id, rows(batch))
    assert target.revert(JOB, SINK, 4, SCHEMA.empty_table(), {3, 5}) == 2  # rows removed
    assert content(target) == sorted(batches[1] + batches[2], key=repr)
    assert target.committed_through(JOB, SINK) == 4
    assert target.commit(JOB, SINK, 6, rows(batches[3])) is True
    assert target.commit(JOB, SINK, 6, rows(batches[3])) is False
    assert content(target) == sorted(batches[1] + batches[2] + batches[3], key=repr)  # each row once


@pytest.mark.parametrize("key", [("word",), None])
def test_prepare_refuses_a_target_with_other_columns(tmp_path: Path, kind: str, key: tuple[str, ...] | None) -> None:
    target = make(kind, tmp_path, key)
    target.prepare()
    target.commit(JOB, SINK, 1, rows({"a": 1}))
    make(kind, tmp_path, key).prepare()  # the same declaration: fine, and idempotent
    other = pa.schema([("word", pa.string()), ("count", pa.string()), ("extra", pa.int32())])
    with pytest.raises(SinkSchemaError) as err:
        make(kind, tmp_path, key, other).prepare()
    assert "extra" in str(err.value) and "count" in str(err.value)
    assert content(target) == ({"a": 1} if key else [("a", 1)])


# ---- a model of the contract, for any sequence of commits, replays and reverts

operations = st.lists(
    st.one_of(
        # a commit: of the next checkpoint, past a gap, or a replay of one at or below the record
        st.tuples(st.sampled_from(["next", "gap", "replay"]),
                  st.lists(st.tuples(st.sampled_from("abcde"), st.none() | st.integers(-5, 5)), max_size=4)),
        # a revert to one of the committed checkpoints (an index into them)
        st.tuples(st.just("revert"), st.integers(0, 20)),
    ),
    max_size=8,
)


def run_against_model(target: SinkTarget, ops: list) -> None:
    keyed = target.key is not None
    target.prepare()
    history: dict[int, dict | list] = {}  # checkpoint -> content as of it
    current: dict | list = {} if keyed else []
    through: int | None = None
    for what, arg in ops:
        if what == "revert":
            if not history:
                continue
            checkpoint_id = sorted(history)[arg % len(history)]
            state = history[checkpoint_id]
            # the model's ids follow its epochs: the later epochs are the checkpoints committed after this one
            target.revert(JOB, SINK, checkpoint_id, rows(state) if keyed else SCHEMA.empty_table(),
                          {c for c in history if c > checkpoint_id})
            current, through = state, checkpoint_id
            history = {c: v for c, v in history.items() if c <= checkpoint_id}
        else:
            batch = dict(arg) if keyed else arg
            checkpoint_id = {"next": (through or 0) + 1, "gap": (through or 0) + 3, "replay": through or 0}[what]
            applied = target.commit(JOB, SINK, checkpoint_id, rows(batch))
            assert applied == (through is None or checkpoint_id > through)
            if applied:
                current = {**current, **batch} if keyed else sorted([*current, *batch], key=repr)
                through = history_id = checkpoint_id
                history[history_id] = current
        assert target.committed_through(JOB, SINK) == through
        assert content(target) == current


@pytest.mark.parametrize("key", [("word",), None])
@pytest.mark.parametrize("kind_", KINDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations)
def test_any_sequence_matches_the_model(kind_: str, key: tuple[str, ...] | None, ops: list) -> None:
    with tempfile.TemporaryDirectory() as where:
        run_against_model(make(kind_, Path(where), key), ops)


# ---- the Parquet directory: crash at every step, the reader's recipe, one owner

MUTATIONS = [(os, "mkdir"), (os, "rename"), (os, "link"), (os, "unlink"), (os, "rmdir"), (os, "fsync"),
             (pq, "write_table")]


@contextmanager
def crash_at(monkeypatch: pytest.MonkeyPatch, step: int) -> Iterator[None]:
    """The process dies at the ``step``-th file system change (0-based) made inside the block."""
    done = itertools.count()

    def dying(fn):
        def change(*args, **kwargs):
            if next(done) == step:
                raise ProcessCrash(f"crash at step {step}: {fn.__name__}{args[:1]}")
            return fn(*args, **kwargs)
        return change

    with monkeypatch.context() as m:
        for module, name in MUTATIONS:
            m.setattr(module, name, dying(getattr(module, name)))
        yield


def recipe(path: Path, key: tuple[str, ...] | None) -> dict | list:
    """What a reader without ABS Replay sees, by the module docstring's recipe."""
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    if table.num_rows == 0:
        return {} if key else []
    table = table.filter(pc.equal(table.column("generation"), pc.max(table.column("generation"))))
    ordered = sorted(table.to_pylist(), key=lambda r: r["checkpoint_id"])
    if key:
        return {r["word"]: r["count"] for r in ordered}  # the newest checkpoint's value wins
    return sorted(((r["word"], r["count"]) for r in ordered), key=repr)


def seeded(path: Path, key: tuple[str, ...] | None) -> ParquetDirectory:
    target = ParquetDirectory(path, SCHEMA, key)
    target.prepare()
    for checkpoint_id, batch in enumerate([[("a", 1), ("b", 1)], [("a", 2)], [("c", 3), ("b", 3)]], start=1):
        target.commit(JOB, SINK, checkpoint_id, rows(batch))
    return target


def operation(name: str, key: tuple[str, ...] | None):
    at_2 = rows({"a": 2, "b": 1}) if key else SCHEMA.empty_table()
    if name == "commit":
        return lambda t: t.commit(JOB, SINK, 4, rows([("d", 4), ("a", 4)]))
    return lambda t: t.revert(JOB, SINK, 2, at_2, {3})


def observed(target: ParquetDirectory) -> tuple:
    return content(target), target.committed_through(JOB, SINK)


@pytest.mark.parametrize("key", [("word",), None])
@pytest.mark.parametrize("name", ["commit", "revert"])
def test_parquet_a_crash_at_any_step_leaves_before_or_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            key: tuple[str, ...] | None, name: str) -> None:
    run = operation(name, key)
    before = observed(seeded(tmp_path / "before", key))
    reference = seeded(tmp_path / "after", key)
    run(reference)
    after = observed(reference)
    assert before != after
    seen = set()
    for step in itertools.count():
        target = seeded(tmp_path / f"step{step}", key)
        with crash_at(monkeypatch, step):
            try:
                run(target)
            except ProcessCrash:
                crashed = True
            else:
                crashed = False
        fresh = ParquetDirectory(target.path, SCHEMA, key)  # what the next process sees
        state = observed(fresh)
        assert state in (before, after), f"crash at step {step}"
        assert recipe(target.path, key) == state[0], f"crash at step {step}"
        if not crashed:
            assert state == after
            break
        seen.add(state == after)
        run(fresh)  # the retry converges, and leaves nothing behind
        assert observed(fresh) == after
        owner, live = sorted(e.name for e in target.path.iterdir())  # a redone revert is one generation on
        assert owner == "_abs_sink.json" and live.startswith("generation=")
        assert fresh.commit(JOB, SINK, 5, rows({"z": 5})) is True
    assert step > 5 and seen == {False, True}, "crashes both before and after the commit point were tried"


def test_parquet_readers_recipe_matches_read_after_commits_and_reverts(tmp_path: Path) -> None:
    target = seeded(tmp_path, ("word",))
    assert recipe(tmp_path, ("word",)) == content(target) == {"a": 2, "b": 3, "c": 3}
    target.revert(JOB, SINK, 1, rows({"a": 1, "b": 1}), {2, 3})
    target.commit(JOB, SINK, 2, rows({"b": 7}))
    assert recipe(tmp_path, ("word",)) == content(target) == {"a": 1, "b": 7}


def test_parquet_directory_belongs_to_one_sink(tmp_path: Path) -> None:
    target = seeded(tmp_path, ("word",))
    with pytest.raises(SinkSchemaError, match="belongs to sink 'counts' of job 'wordcount'"):
        target.commit(JOB, "other", 4, rows({"a": 1}))
    with pytest.raises(SinkSchemaError):
        target.committed_through("another_job", SINK)
    with pytest.raises(SinkSchemaError, match="keyed by 'word'"):
        ParquetDirectory(tmp_path, SCHEMA, None).prepare()
    assert target.committed_through(JOB, SINK) == 3


def test_parquet_prepare_refuses_foreign_files(tmp_path: Path) -> None:
    pq.write_table(rows({"a": 1}), tmp_path / "data.parquet")
    with pytest.raises(SinkSchemaError, match="data.parquet"):
        ParquetDirectory(tmp_path, SCHEMA, ("word",)).prepare()


# ---- the Delta table: the record is the table's own, read by any process


def test_delta_a_fresh_view_sees_the_record(tmp_path: Path) -> None:
    target = make("delta", tmp_path, ("word",))
    target.prepare()
    target.commit(JOB, SINK, 7, rows({"a": 1}))
    fresh = DeltaTable(str(tmp_path / "sink"), SCHEMA, ("word",))
    assert fresh.committed_through(JOB, SINK) == 7
    assert fresh.committed_through(JOB, "another_sink") is None
    assert fresh.commit(JOB, SINK, 7, rows({"a": 2})) is False
    assert deltalake.DeltaTable(str(tmp_path / "sink")).transaction_version(app_id(JOB, SINK)) == 7


def test_delta_revert_moves_the_application_transaction_back(tmp_path: Path) -> None:
    target = make("delta", tmp_path, ("word",))
    target.prepare()
    for checkpoint_id in range(1, 5):
        target.commit(JOB, SINK, checkpoint_id, rows({"a": checkpoint_id}))
    target.revert(JOB, SINK, 2, rows({"a": 2}), {3, 4})
    table = deltalake.DeltaTable(str(tmp_path / "sink"))
    assert table.transaction_version(app_id(JOB, SINK)) == 2
    assert target.commit(JOB, SINK, 3, rows({"a": 30})) is True
    assert content(target) == {"a": 30}


def test_delta_a_concurrent_commit_of_the_same_sink_conflicts(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    target = make("delta", tmp_path, None)
    target.prepare()
    target.commit(JOB, SINK, 1, rows([("a", 1)]))
    stale = deltalake.DeltaTable(str(tmp_path / "sink"))  # read before the other writer commits 2
    make("delta", tmp_path, None).commit(JOB, SINK, 2, rows([("b", 2)]))
    monkeypatch.setattr(target, "_open", lambda: stale)
    with pytest.raises(deltalake.exceptions.CommitFailedError):
        target.commit(JOB, SINK, 2, rows([("b", 2)]))
    assert content(make("delta", tmp_path, None)) == [("a", 1), ("b", 2)]
