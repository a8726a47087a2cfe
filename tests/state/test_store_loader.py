"""A store task finds its subtask's store on its executor, or builds it from the checkpoint files (no Spark here).

``stores.loader.opened`` is what every store task calls first: a store holding the version is a hit (rolled back
to it for an apply), anything else a reload from the snapshot chain, each file checked against its ack's rows
and its manifest's bytes and sha256; a chain's newest row per key wins.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.state.stores import loader as store_loader
from spark_jobs.state.stores.store import Layout, StoreVersionError, SubtaskStore
from spark_jobs.state.stores.loader import INTEGRITY, StateFile, StoreAt, opened

SCHEMA = pa.schema([("k", pa.string()), ("n", pa.int64()), ("updated", pa.int64())])
LAYOUT = Layout(SCHEMA, ("k",), (("n", "sum"),))


class Events(list):
    """Stands in for the Spark accumulator the tasks add their events to."""

    def add(self, events: list) -> None:
        self.extend(events)


def snapshot(root, checkpoint_id: int, rows: dict[str, int], sealed: bool = True) -> StateFile:
    """Subtask 0's file of ``checkpoint_id`` under ``root`` (``chk-<n>/count/subtask=0/``), with the operator
    folder's manifest listing it as the snapshot writer's seal does."""
    folder = root / f"chk-{checkpoint_id}" / "count" / "subtask=0"
    folder.mkdir(parents=True)
    part = folder / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist([{"k": k, "n": n, "updated": checkpoint_id} for k, n in rows.items()],
                                        SCHEMA), part)
    data = part.read_bytes()
    entry = {"path": "subtask=0/part-00000.parquet", "bytes": len(data), "rows": len(rows),
             "sha256": hashlib.sha256(data).hexdigest()}
    if sealed:
        (folder.parent / "_manifest.json").write_text(json.dumps({"files": [entry]}))
    return StateFile(f"file://{folder}", len(rows), checkpoint_id, sealed)


def state_of(store: SubtaskStore, version: int) -> dict[str, int]:
    return {r["k"]: r["n"] for b in store.rows_as_of(version) for r in b.to_pylist()}


@pytest.fixture
def chain(tmp_path):
    full = snapshot(tmp_path / "state", 3, {"a": 1, "b": 2, "c": 3})
    delta = snapshot(tmp_path / "state", 4, {"b": 5, "d": 1})
    return full, delta


def at(tmp_path, files, version: int, reload: bool = False) -> StoreAt:
    return StoreAt(str(tmp_path / "stores"), "job/inc/count/p1", LAYOUT, version, (tuple(files),), reload)


def test_a_missing_store_is_built_from_its_chain_newest_row_first(tmp_path, chain) -> None:
    events = Events()
    store = opened(at(tmp_path, chain, 4), 0, "count", events, "apply")
    try:
        assert state_of(store, 4) == {"a": 1, "b": 5, "c": 3, "d": 1}
        assert store.info().version == 4
    finally:
        store.close()
    assert [e[3:5] for e in events] == [("apply", "reload")]
    # the next task on this executor finds it
    opened(at(tmp_path, chain, 4), 0, "count", events, "read").close()
    assert events[-1][3:5] == ("read", "hit")


def test_an_apply_rolls_a_store_ahead_of_its_version_back_and_a_read_leaves_it(tmp_path, chain) -> None:
    store = opened(at(tmp_path, chain, 4), 0, "count", Events(), "apply")
    store.apply(pa.Table.from_pylist([{"k": "a", "n": 10, "updated": 5}], SCHEMA), 5, 4)
    store.close()
    events = Events()
    read = opened(at(tmp_path, chain, 4), 0, "count", events, "read")
    assert read.info().version == 5 and state_of(read, 4)["a"] == 1  # as of 4, epoch 5 still applied
    read.close()
    apply = opened(at(tmp_path, chain, 4), 0, "count", events, "apply")
    assert apply.info().version == 4 and state_of(apply, 4)["a"] == 1
    apply.close()
    assert [e[4] for e in events] == ["hit", "hit"]


def test_a_store_that_cannot_reach_the_version_or_must_reload_is_loaded_anew(tmp_path, chain) -> None:
    full, _ = chain
    opened(at(tmp_path, chain, 4), 0, "count", Events(), "apply").close()
    events = Events()
    store = opened(at(tmp_path, [full], 3), 0, "count", events, "apply")  # below its floor: reloaded at 3
    assert state_of(store, 3) == {"a": 1, "b": 2, "c": 3}
    store.close()
    opened(at(tmp_path, [full], 3, reload=True), 0, "count", events, "apply").close()
    assert [e[4] for e in events] == ["reload", "reload"]


def test_a_reload_removes_the_operators_stores_of_other_layouts(tmp_path, chain) -> None:
    other = StoreAt(str(tmp_path / "stores"), "job/inc/count/p2", LAYOUT, 4, (tuple(chain),))
    opened(other, 0, "count", None, "apply").close()
    opened(at(tmp_path, chain, 4), 0, "count", None, "apply").close()
    assert sorted(p.name for p in (tmp_path / "stores/job/inc/count").iterdir() if p.is_dir()) == ["p1"]


@pytest.mark.parametrize("damage, problem", [
    (lambda part: part.write_bytes(part.read_bytes()[:100]), "has 100 bytes"),
    (lambda part: part.write_bytes(part.read_bytes().replace(b"PAR1", b"PAR2", 1)), "sha256 differs"),
    (lambda part: part.unlink(), "missing"),
    (lambda part: (part.parent.parent / "_manifest.json").unlink(), "manifest"),
])
def test_a_damaged_file_is_named_and_nothing_is_loaded(tmp_path, chain, damage, problem) -> None:
    full, delta = chain
    damage(tmp_path / "state/chk-4/count/subtask=0/part-00000.parquet")
    with pytest.raises(RuntimeError, match=rf"^{INTEGRITY}state file {delta.uri} of checkpoint 4.*{problem}"):
        opened(at(tmp_path, chain, 4), 0, "count", Events(), "apply")
    with pytest.raises(StoreVersionError):  # no store was left behind
        SubtaskStore(tmp_path / "stores/job/inc/count/p1/subtask-0", LAYOUT).open()


def test_rows_other_than_the_ack_says_are_refused_even_unsealed(tmp_path) -> None:
    delta = snapshot(tmp_path / "state", 5, {"a": 1}, sealed=False)
    wrong = StateFile(delta.uri, 2, 5, sealed=False)
    with pytest.raises(RuntimeError, match="1 rows, the catalog says 2"):
        opened(at(tmp_path, [wrong], 5), 0, "count", None, "apply")


def test_no_files_to_rebuild_a_lost_store_stops_the_run(tmp_path) -> None:
    lost = StoreAt(str(tmp_path / "stores"), "job/inc/count/p1", LAYOUT, 7, None)
    with pytest.raises(StoreVersionError, match="no files rebuild it"):
        opened(lost, 0, "count", None, "apply")


def test_stores_live_in_the_executors_local_directory(monkeypatch, tmp_path) -> None:
    """Spark gives a Python worker its executor's block manager folders; the stores go beside them, in the
    local dir itself, which outlives the application."""
    for blocks in (f"{tmp_path}/blockmgr-1", f"{tmp_path}/spark-2/executor-3/blockmgr-4,/elsewhere/blockmgr-5"):
        monkeypatch.setenv("SPARK_LOCAL_DIRS", blocks)
        assert store_loader.executor_root() == f"{tmp_path}/absreplay-stores"
