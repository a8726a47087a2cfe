"""What runs inside the local stores' Spark tasks: apply an epoch, read, dump, load.

Kept apart from ``spark_jobs.state.stores.provider`` (which plans these tasks) so that a
Python worker unpickling a task imports only this module, ``stores.store`` and
pyarrow: not pyspark.sql's planning side, the catalog or SQLAlchemy, which took
0.8 s of every new worker's start.

Each task serves the store of the Spark partition it runs in: the rows are
partitioned by subtask with ``repartitionById``, so partition i holds subtask i's
rows alone, and a partition with no rows still runs its store's task (an epoch
that touched none of its keys still moves its version). It finds that store on
its own executor, or builds it there from the checkpoint files
(``spark_jobs.state.stores.loader``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import TaskContext

from coordinator.checkpoints import state_files
from coordinator.storage import filesystems

from spark_jobs.state.stores.store import Layout
from spark_jobs.state.stores.loader import StoreAt, opened

Task = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def checked(batches: Iterator[pa.RecordBatch], subtask: str, i: int) -> Iterator[pa.RecordBatch]:
    """``batches`` as they come, each checked to hold subtask ``i``'s rows alone."""
    for batch in batches:
        if batch.num_rows:
            found = batch.column(subtask).unique().to_pylist()
            if found != [i]:
                raise RuntimeError(f"the task of store {i} was given rows of subtasks {sorted(found)}")
            yield batch


def apply_task(at: StoreAt, operator: str, events, subtask: str, versions: list[int],
               deltas: list[str] | None, merged: list[str], present: str) -> Task:
    """Fold the contributions of epochs ``versions`` (``per_epoch``: the rows are one per key, each merging
    every epoch's) into the store at ``at.version``; yields the changed rows of each epoch (with ``subtask``),
    and writes each epoch's as the subtask's delta file under its folder in ``deltas`` when given."""
    layout = at.layout

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        i = TaskContext.get().partitionId()
        mine = list(checked(batches, subtask, i))
        table = per_epoch(pa.Table.from_batches(mine), layout, versions, merged, present) if mine else \
            layout.schema.empty_table()
        store = opened(at, i, operator, events, "apply")
        try:
            out = store.apply(table, versions, at.version)
        finally:
            store.close()
        for version, delta in zip(versions, deltas, strict=True) if deltas is not None else ():
            rows = out if len(versions) == 1 else out.filter(pc.equal(out.column("updated"), version))
            if rows.num_rows:
                write_delta(rows, f"{delta}/{subtask}={i}")
        yield from out.append_column(subtask, pa.array([i] * out.num_rows, pa.int32())).to_batches()

    return apply


def per_epoch(wide: pa.Table, layout: Layout, versions: list[int], merged: list[str], present: str) -> pa.Table:
    """Rows of one key each, ``<column>@<j>`` merging the contributions of epoch ``versions[j]`` and bit j + 1
    of ``present`` saying whether it had any, as one row per key and epoch that touched it (``updated``: the
    epoch), with the layout's columns. Bit 0 marks keys with records of no epoch of ``versions``: they come
    out with a NULL ``updated``, which the store's apply refuses."""
    bits = wide.column(present).to_numpy()
    parts = []
    for j, version in [*enumerate(versions), (None, None)]:
        mask = (bits & (1 if j is None else 1 << (j + 1))) != 0
        if not mask.any():
            continue
        rows = wide.filter(pa.array(mask))
        values = {m: rows.column(f"{m}@{j or 0}") for m in merged}  # records of no epoch: any values
        updated = pa.nulls(rows.num_rows, pa.int64()) if j is None else pa.repeat(pa.scalar(version, pa.int64()),
                                                                                    rows.num_rows)
        parts.append(pa.table([values[c] if c in values else updated if c == "updated" else rows.column(c)
                               for c in layout.columns], names=list(layout.columns)))
    return pa.concat_tables(parts) if parts else layout.schema.empty_table()


def read_task(at: StoreAt, operator: str, events, since: int | None) -> Task:
    """The rows of the store of this task's partition as of ``at.version`` (changed after ``since``)."""

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:  # the partition's one placeholder row
            pass
        store = opened(at, TaskContext.get().partitionId(), operator, events, "read")
        try:
            yield from store.rows_as_of(at.version, since)
        finally:
            store.close()

    return read


def dump_task(at: StoreAt, operator: str, events, snapshot: str, subtask: str) -> Task:
    """Write the store of this task's partition as of ``at.version`` as the subtask's file of a full snapshot
    under folder ``snapshot`` (none when it holds no row); yields the rows written (with ``subtask``)."""

    read = read_task(at, operator, events, None)

    def dump(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        i = TaskContext.get().partitionId()
        rows = pa.Table.from_batches(list(read(batches)), at.layout.schema)
        if rows.num_rows:
            write_delta(rows, f"{snapshot}/{subtask}={i}")
        yield from rows.append_column(subtask, pa.array([i] * rows.num_rows, pa.int32())).to_batches()

    return dump


def split_task(layout: Layout, subtask: str, folder: str) -> Task:
    """Write the task's rows (one subtask's, at a new parallelism) as that subtask's file under ``folder``,
    whatever the filesystem (``state_files.filesystem``), for its store to load from; yields its row count."""

    def split(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        i = TaskContext.get().partitionId()
        mine = [b.select(layout.columns) for b in checked(batches, subtask, i)]
        # Spark's batches may say NOT NULL where the store's layout does not
        rows = pa.Table.from_batches(mine).cast(layout.schema) if mine else layout.schema.empty_table()
        if rows.num_rows:
            fs, path = state_files.filesystem(f"{folder}/{subtask}={i}")
            fs.create_dir(path, recursive=True)
            pq.write_table(rows, f"{path}/part-00000.parquet", filesystem=fs, compression="snappy")
        yield pa.record_batch([pa.array([i], pa.int32()), pa.array([rows.num_rows], pa.int64())],
                              names=[subtask, "rows"])

    return split


def write_delta(rows: pa.Table, directory: str) -> None:
    """One subtask's delta (or full snapshot) file, whole or not at all (a retried task writes the same rows
    again), on any filesystem (``filesystems.write_whole``)."""
    filesystems.write_whole(f"{directory}/part-00000.parquet",
                            lambda fs, path: pq.write_table(rows, path, filesystem=fs, compression="snappy"))
