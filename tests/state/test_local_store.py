"""The local SQLite store of a keyed aggregate's subtask, against a plain-Python model.

Sequences of epochs (hypothesis) are applied; after each, the store read as of every version it
keeps, the rows changed since any of them, and a rollback must equal the model's state then.
A retried epoch changes nothing; a store cannot skip or repeat a version; a bulk load is atomic.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.state.stores.store import KEEP, Layout, StoreVersionError, SubtaskStore

SCHEMA = pa.schema([("k", pa.string()), ("n", pa.int64()), ("hi", pa.int64()), ("s", pa.float64()),
                    ("c", pa.int64()), ("avg", pa.float64()), ("updated", pa.int64())])
LAYOUT = Layout(SCHEMA, ("k",), (("n", "sum"), ("hi", "max"), ("s", "sum"), ("c", "sum"), ("avg", "first")),
                (("avg", "s", "c"),))

epochs = st.lists(st.dictionaries(st.sampled_from("abcdefgh"), st.tuples(st.integers(-5, 5), st.integers(-50, 50)),
                                  max_size=5), min_size=1, max_size=9)


def contributions(epoch: dict, version: int) -> pa.Table:
    return pa.Table.from_pylist([{"k": k, "n": 1, "hi": v, "s": float(v), "c": 1, "avg": None, "updated": version}
                                 for k, (_, v) in epoch.items()], SCHEMA)


def model_step(state: dict, epoch: dict, version: int) -> dict:
    new = dict(state)
    for k, (_, v) in epoch.items():
        n, hi, s, c, _, _ = state.get(k, (0, None, 0.0, 0, None, None))
        hi = v if hi is None else max(hi, v)
        new[k] = (n + 1, hi, s + v, c + 1, (s + v) / (c + 1), version)
    return new


def as_dict(batches) -> dict:
    rows = [r for b in batches for r in b.to_pylist()]
    return {r["k"]: (r["n"], r["hi"], r["s"], r["c"], r["avg"], r["updated"]) for r in rows}


@pytest.fixture
def store(tmp_path):
    s = SubtaskStore(tmp_path / "subtask-0", LAYOUT)
    s.load([], 0)
    with s:
        yield s


@settings(max_examples=40, deadline=None)
@given(epochs)
def test_reads_as_of_every_kept_version_and_rollback_equal_the_model(tmp_path_factory, sequence):
    s = SubtaskStore(tmp_path_factory.mktemp("store") / "subtask-0", LAYOUT)
    s.load([], 0)
    with s:
        history = {0: {}}
        for version, epoch in enumerate(sequence, 1):
            out = s.apply(contributions(epoch, version), version, version - 1)
            history[version] = model_step(history[version - 1], epoch, version)
            assert as_dict([out]) == {k: history[version][k] for k in epoch}
            info = s.info()
            assert info.version == version and info.rows == len(history[version])
            for v in range(info.floor, version + 1):
                assert as_dict(s.rows_as_of(v)) == history[v]
                for since in range(0, v + 1):
                    assert as_dict(s.rows_as_of(v, since)) == {k: r for k, r in history[v].items() if r[5] > since}
            assert info.floor == max(0, version - KEEP + 1)
        back = max(s.info().floor, len(sequence) - 2)
        s.rollback(back)
        assert as_dict(s.rows_as_of(back)) == history[back] and s.info().version == back
        if back < len(sequence):  # and the epoch after it applies again on top
            s.apply(contributions(sequence[back], back + 1), back + 1, back)
            assert as_dict(s.rows_as_of(back + 1)) == history[back + 1]


@settings(max_examples=40, deadline=None)
@given(epochs, st.lists(st.integers(1, 5), min_size=1, max_size=9))
def test_epochs_applied_together_equal_them_applied_one_by_one(tmp_path_factory, sequence, sizes):
    """A catch-up folds several epochs in one apply: each epoch's changed rows, the state, the versions
    it can be read as of, and a rollback are those of the epochs applied one at a time (the model)."""
    s = SubtaskStore(tmp_path_factory.mktemp("store") / "subtask-0", LAYOUT)
    s.load([], 0)
    with s:
        history, done = {0: {}}, 0
        for size in sizes:
            versions = list(range(done + 1, min(done + size, len(sequence)) + 1))
            if not versions:
                break
            together = pa.concat_tables([contributions(sequence[v - 1], v) for v in versions])
            out = s.apply(together, versions, done)
            for v in versions:
                history[v] = model_step(history[v - 1], sequence[v - 1], v)
                mine = out.filter(pa.compute.equal(out.column("updated"), v))
                assert as_dict([mine]) == {k: history[v][k] for k in sequence[v - 1]}
            done = versions[-1]
            info = s.info()
            assert (info.version, info.rows, info.floor) == (done, len(history[done]), max(0, done - KEEP + 1))
            for v in range(info.floor, done + 1):
                assert as_dict(s.rows_as_of(v)) == history[v]
                assert as_dict(s.rows_as_of(done, v)) == {k: r for k, r in history[done].items() if r[5] > v}
        s.rollback(s.info().floor)
        assert as_dict(s.rows_as_of(s.info().floor)) == history[s.info().floor]


def test_a_retried_catch_up_rolls_back_and_returns_the_same_rows(store):
    together = pa.concat_tables([contributions({"a": (0, 3), "b": (0, 1)}, 1), contributions({"a": (0, 2)}, 2)])
    first = store.apply(together, [1, 2], 0)
    again = store.apply(together, [1, 2], 0)
    assert again.to_pylist() == first.to_pylist()
    assert as_dict(store.rows_as_of(2)) == {"a": (2, 3, 5.0, 2, 2.5, 2), "b": (1, 1, 1.0, 1, 1.0, 1)}
    assert as_dict(store.rows_as_of(1)) == {"a": (1, 3, 3.0, 1, 3.0, 1), "b": (1, 1, 1.0, 1, 1.0, 1)}


def test_a_retried_epoch_returns_its_rows_and_changes_nothing(store):
    first = store.apply(contributions({"a": (0, 3)}, 1), 1, 0)
    again = store.apply(contributions({"a": (0, 3)}, 1), 1, 0)
    assert again.to_pylist() == first.to_pylist()
    assert as_dict(store.rows_as_of(1)) == {"a": (1, 3, 3.0, 1, 3.0, 1)}


def test_a_store_refuses_to_skip_or_go_back_a_version(store):
    with pytest.raises(StoreVersionError, match="at version 0, epoch 5 starts from 4"):
        store.apply(contributions({"a": (0, 1)}, 5), 5, 4)
    for v in range(1, KEEP + 3):
        store.apply(contributions({"a": (0, v)}, v), v, v - 1)
    with pytest.raises(StoreVersionError, match="not 1"):
        store.rollback(1)
    with pytest.raises(StoreVersionError, match="not 2"):
        list(store.rows_as_of(2))


def test_a_contribution_of_no_epoch_being_applied_fails_the_apply(store):
    """A record a catch-up's scan placed in no epoch (``epoch_source.epoch_of_file``) fails the apply, whole."""
    stray = pa.concat_tables([contributions({"a": (0, 1)}, 1), contributions({"b": (0, 2)}, 3)])
    with pytest.raises(StoreVersionError, match=r"contributions of epochs \[3\] given to epochs \[1, 2\]"):
        store.apply(stray, [1, 2], 0)
    untagged = contributions({"a": (0, 1)}, 1).set_column(SCHEMA.get_field_index("updated"), "updated",
                                                         pa.array([None], pa.int64()))
    with pytest.raises(StoreVersionError, match=r"contributions of epochs \[None\]"):
        store.apply(untagged, 1, 0)
    assert store.info().version == 0 and as_dict(store.rows_as_of(0)) == {}


def test_a_load_replaces_the_store_whole(tmp_path):
    s = SubtaskStore(tmp_path / "subtask-0", LAYOUT)
    s.load([contributions({"a": (0, 1), "b": (0, 2)}, 3).to_batches()[0]], 3)
    old = s.current_file
    with s:
        assert s.info().version == 3 and as_dict(s.rows_as_of(3)).keys() == {"a", "b"}

    def failing():
        yield contributions({"c": (0, 1)}, 4).to_batches()[0]
        raise RuntimeError("the loading task died")

    with pytest.raises(RuntimeError):
        s.load(failing(), 4)
    assert s.current_file == old  # the half-written generation never became current, and is gone
    assert sorted(p.name for p in s.dir.glob("gen-*")) == [old.name]
    s.load([], 9)
    with s:
        assert s.info().version == 9 and as_dict(s.rows_as_of(9)) == {}
    assert not old.exists()


def test_no_store_yet_is_an_error_naming_its_directory(tmp_path):
    with pytest.raises(StoreVersionError, match="no store in"):
        SubtaskStore(tmp_path / "nowhere", LAYOUT).open()


def test_a_store_task_refuses_rows_of_another_subtask() -> None:
    """The stores' tasks trust partition i to hold subtask i's rows alone (repartitionById): a row of
    another subtask would be applied to the wrong store, so it stops the task instead."""
    from spark_jobs.state.stores.tasks import checked

    mine = pa.record_batch([pa.array([0, 0], pa.int32()), pa.array(["a", "b"])], names=["subtask", "k"])
    other = pa.record_batch([pa.array([0, 1], pa.int32()), pa.array(["c", "d"])], names=["subtask", "k"])
    assert [b.num_rows for b in checked(iter([mine]), "subtask", 0)] == [2]
    with pytest.raises(RuntimeError, match=r"store 0 was given rows of subtasks \[0, 1\]"):
        list(checked(iter([mine, other]), "subtask", 0))


def test_a_store_task_unpivots_each_keys_merged_row_into_the_epochs_that_touched_it(store) -> None:
    """Spark merges each key's contributions of a catch-up's epochs in one row (``stores.apply._per_key``):
    ``<column>@<j>`` for epoch j, bit j + 1 of the mask when it had any, bit 0 for records of no epoch of the
    group. The store's task turns them into one row per key and epoch (``store_tasks.per_epoch``), which fold
    as the epochs applied one by one do."""
    from spark_jobs.state.stores.tasks import per_epoch

    merged = ["n", "hi", "s", "c", "avg"]
    # a: epochs 4 and 6; b: epoch 6 only; c: none of them (never sent by Spark, but harmless)
    wide = pa.table({"k": ["a", "b", "c"], "_present": [2 | 8, 8, 0],
                     **{f"{m}@{j}": [v(j, 0), v(j, 1), None] for m, v in {
                         "n": lambda j, i: 1, "hi": lambda j, i: 10 * j + i, "s": lambda j, i: float(j + i),
                         "c": lambda j, i: 1, "avg": lambda j, i: None}.items() for j in range(3)}})
    rows = per_epoch(wide.cast(pa.schema([pa.field(f.name, pa.float64() if f.name.startswith(("s@", "avg@")) else
                                                   f.type) for f in wide.schema])), LAYOUT, [4, 5, 6], merged, "_present")
    assert rows.column_names == list(LAYOUT.columns)
    assert sorted((r["k"], r["updated"], r["hi"]) for r in rows.to_pylist()) == [("a", 4, 0), ("a", 6, 20), ("b", 6, 21)]
    store.apply(rows, [4, 5, 6], 0)
    assert as_dict(store.rows_as_of(6, None)) == {"a": (2, 20, 2.0, 2, 1.0, 6), "b": (1, 21, 3.0, 1, 3.0, 6)}
    stray = wide.set_column(1, "_present", pa.array([2, 1, 0]))
    assert [r["updated"] for r in per_epoch(stray, LAYOUT, [7, 8, 9], merged, "_present").to_pylist()] == [7, None]


def test_a_python_worker_running_a_store_task_imports_no_planning_side() -> None:
    """What a Python worker imports to unpickle a store task: not the catalog, SQLAlchemy or the job
    API (0.8 s of every new worker's start when it did)."""
    import subprocess
    import sys

    code = "import sys, spark_jobs.state.stores.tasks; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "spark_jobs.state.stores.store" in loaded
    heavy = [m for m in loaded if m.split(".")[0] in ("sqlalchemy", "absreplay")
             or m.startswith(("coordinator.catalog", "coordinator.dataflow", "coordinator.settings"))
             or m in ("spark_jobs.state.keyed_state", "spark_jobs.state.stores.provider", "spark_jobs.operators.keyed_operators")]
    assert heavy == []
