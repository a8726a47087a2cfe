"""Tombstones (coordinator.sinks.deletes) at every upsert target, keyed by two columns: the commit deletes
the key's row, a delete of a key the target lacks changes nothing but still records the checkpoint, and the
merged write of several checkpoints keeps a delete that is newest; a reader without ABS Replay finds a
Parquet directory's rows after deletes by the recipe of docs/jobs.md. No Spark."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from sqlalchemy.orm import Session

from coordinator.catalog.db import make_engine
from coordinator.dataflow.jobs import SinkSpec
from coordinator.sinks import transactions
from coordinator.sinks.declarations import DeltaTable, ParquetDirectory, SqlTable
from coordinator.sinks.deletes import DELETE

COLUMNS = (("shop", "string"), ("user", "string"), ("items", "long"))
KEY = ("shop", "user")


def rows(*items: tuple[str, str, int | None, bool | None]) -> pa.Table:
    shops, users, counts, gone = zip(*items, strict=True) if items else ((), (), (), ())
    return pa.table({"shop": pa.array(shops, pa.string()), "user": pa.array(users, pa.string()),
                     "items": pa.array(counts, pa.int64()), DELETE: pa.array(gone, pa.bool_())})


def content(target) -> dict[tuple[str, str], int]:
    return {(r["shop"], r["user"]): r["items"] for r in target.read().to_pylist()}


@pytest.fixture(params=["sql", "delta", "parquet"])
def target(request, tmp_path, sqlite_url):
    declaration = {"sql": SqlTable("carts"), "delta": DeltaTable(str(tmp_path / "delta")),
                   "parquet": ParquetDirectory(str(tmp_path / "parquet"))}[request.param]
    spec = SinkSpec("out", declaration, COLUMNS, KEY, "cart")
    t = spec.target(sqlite_url)
    t.prepare()
    return t


def test_a_tombstone_deletes_its_keys_row_in_the_commit(target) -> None:
    assert target.commit("j", "out", 1, rows(("a", "u1", 2, None), ("a", "u2", 1, None), ("b", "u1", 5, None)))
    # ("b", "u2") was never there: its delete changes nothing; ("a", "u1") is deleted, ("b", "u1") kept
    assert target.commit("j", "out", 2, rows(("a", "u1", None, True), ("b", "u2", None, True), ("a", "u2", 3, None)))
    assert content(target) == {("a", "u2"): 3, ("b", "u1"): 5}
    assert target.committed_through("j", "out") == 2
    assert not target.commit("j", "out", 2, rows(("a", "u2", None, True)))  # a retry writes nothing
    assert content(target) == {("a", "u2"): 3, ("b", "u1"): 5}
    # only deletes of keys the target lacks: nothing changes, the checkpoint is recorded all the same
    assert target.commit("j", "out", 3, rows(("z", "z", None, True)))
    assert target.committed_through("j", "out") == 3
    # a deleted key comes back with a later upsert; a rewind's revert brings a deleted row back
    assert target.commit("j", "out", 4, rows(("a", "u1", 7, None), ("b", "u1", None, True)))
    assert content(target) == {("a", "u1"): 7, ("a", "u2"): 3}
    state_at_1 = rows(("a", "u1", 2, None), ("a", "u2", 1, None), ("b", "u1", 5, None)).drop_columns([DELETE])
    target.revert("j", "out", 1, state_at_1.append_column("updated", pa.array([1, 1, 1], pa.int64())), {2, 3, 4})
    assert content(target) == {("a", "u1"): 2, ("a", "u2"): 1, ("b", "u1"): 5}


def test_the_merged_write_of_several_checkpoints_keeps_a_newest_delete(sqlite_url) -> None:
    spec = SinkSpec("out", SqlTable("carts"), COLUMNS, KEY, "cart")
    with Session(make_engine(sqlite_url)) as s, s.begin():
        transactions.write_merged(s, spec, "j", [
            (1, rows(("a", "u1", 1, None), ("a", "u2", 1, None))),
            (2, rows(("a", "u1", None, True))),                      # deleted, newest
            (3, rows(("a", "u2", None, True), ("a", "u3", 4, None))),
            (4, rows(("a", "u2", 6, None))),                         # deleted, then back
        ])
    assert content(spec.target(sqlite_url)) == {("a", "u2"): 6, ("a", "u3"): 4}


def current_rows(path: Path, key: list[str]):
    """The reader's recipe of docs/jobs.md (Reading a Parquet directory sink), verbatim: the live generation
    only, and each key's row of its newest checkpoint."""
    live = max(Path(path).glob("generation=*"), key=lambda d: int(d.name.partition("=")[2]))
    rows = ds.dataset(live, format="parquet", partitioning="hive").to_table().to_pandas()
    return rows.sort_values("checkpoint_id").drop_duplicates(key, keep="last").drop(columns="checkpoint_id")


def test_a_reader_of_a_parquet_directory_after_deletes_reads_the_live_generation(tmp_path) -> None:
    path = tmp_path / "parquet"
    target = SinkSpec("out", ParquetDirectory(str(path)), COLUMNS, KEY, "cart").target("sqlite://")
    target.prepare()
    target.commit("j", "out", 1, rows(("a", "u1", 2, None), ("a", "u2", 1, None), ("b", "u1", 5, None)))
    target.commit("j", "out", 2, rows(("a", "u2", 3, None)))  # an upsert: a checkpoint of the same generation
    stale = tmp_path / "generation=1"
    shutil.copytree(path / "generation=1", stale)
    # a delete: the whole content, as one compacted checkpoint of the next generation; then upserts on top
    target.commit("j", "out", 3, rows(("a", "u1", None, True), ("b", "u1", 6, None)))
    target.commit("j", "out", 4, rows(("a", "u2", 4, None), ("c", "u1", 1, None)))
    layout = sorted(str(p.relative_to(path)) for p in path.rglob("*.parquet"))
    assert layout == ["generation=2/checkpoint_id=3/part-0.parquet", "generation=2/checkpoint_id=4/part-0.parquet"]
    # what a delete that died between its rename and its tidying leaves: the old generation beside the live one
    shutil.copytree(stale, path / "generation=1")
    found = current_rows(path, list(KEY))
    assert list(found.columns) == [c for c, _ in COLUMNS]
    assert {(r.shop, r.user): r.items for r in found.itertuples()} == content(target) == {
        ("a", "u2"): 4, ("b", "u1"): 6, ("c", "u1"): 1}
