"""Where a store task finds its subtask's store, and how it builds it from the checkpoint files when it is not there.

A local store is a cache on the executor that runs the task, as Spark Structured
Streaming's state stores are (RocksDB in each executor's local directory; a task
whose executor lacks the version it needs loads it from the checkpoint on the
DFS). The driver opens none: it hands each task a ``StoreAt`` (the version the
task needs, and the files of every subtask's snapshot chain at that version), and
the task

- uses the store it finds under its executor's local directories when it holds
  that version (a *hit*; an apply rolls it back to it when it is ahead, e.g.
  after a failed run, from the undo it keeps);
- else loads it from the files (a *reload*): the chain's full snapshot, then its
  deltas, oldest first, the newest row of each key winning, read through
  pyarrow's filesystems (``file://``, ``hdfs://``, ``s3a://`` as ``s3://``),
  each file checked against the rows its ack recorded and, once sealed, the
  sha256 its manifest lists.

Only the state root, the input and the catalog are shared between hosts. Losing
an executor, its disk or a store folder costs a reload, never data. Each task
reports its hit or reload through an accumulator (``StoreEvents``), which the
run prints and records per task.

A store folder is locked while a task checks or loads it, so two tasks of one
subtask on one host (an epoch's apply, the previous epoch's snapshot read) never
load it twice at once. Executor side only: pyarrow and the store, no pyspark.sql
planning, no catalog.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.accumulators import AccumulatorParam

from coordinator.checkpoints import state_files
from coordinator.checkpoints.manifests import MANIFEST
from coordinator.checkpoints.state_files import newest_per_key
from spark_jobs.state.stores.store import Layout, StoreVersionError, SubtaskStore

#: marks an integrity failure inside a task, so the driver can name it (``StateIntegrityError``) in one line
INTEGRITY = "ABS-STATE-INTEGRITY: "
#: the folder under an executor's local directory (``executor_root``) that holds its stores
STORES = "absreplay-stores"


@dataclass(frozen=True)
class StateFile:
    """A subtask's snapshot files at one checkpoint: a folder of Parquet parts."""

    uri: str
    rows: int
    checkpoint_id: int
    #: its operator folder's manifest lists it (sealed before the ack); an epoch of the running run: not yet
    sealed: bool = True


@dataclass(frozen=True)
class StoreAt:
    """What a store task needs: its subtask's store at ``version``, and how to build it there."""

    #: ``ABS_STORE_DIR``'s folder; "" for the executor's own local directories (``executor_root``)
    root: str
    #: the store's folder under the root: ``<job>/<incarnation>/<operator>/<layout>``
    path: str
    layout: Layout
    version: int
    #: per subtask, the files of its state at ``version``, oldest first (the full snapshot first);
    #: None: no files rebuild it (a store lost in the middle of a run whose deltas are not written yet)
    files: tuple[tuple[StateFile, ...], ...] | None
    #: load from the files even where a store holds ``version`` (a partial recovery mixes checkpoints)
    reload: bool = False

    def directory(self, i: int) -> Path:
        return Path(self.root or executor_root()) / self.path / f"subtask-{i}"


def executor_root() -> str:
    """The stores' folder on this executor: ``absreplay-stores`` in the local directory Spark gives it
    (``SPARK_LOCAL_DIRS``: ``<local dir>/[spark-*/executor-*/]blockmgr-*``), which outlives the application,
    so the next run on this host finds its stores; the temporary directory outside Spark."""
    dirs = os.environ.get("SPARK_LOCAL_DIRS", "")
    if not dirs:
        return str(Path(tempfile.gettempdir()) / STORES)
    local = Path(dirs.split(",")[0])
    while local.name.startswith(("blockmgr-", "executor-", "spark-")) and local.parent != local:
        local = local.parent
    return str(local / STORES)


class StoreEvent(NamedTuple):
    """How one task found its store (``opened``)."""

    operator: str
    subtask: int
    version: int
    #: "apply" | "read"
    task: str
    #: "hit" | "reload"
    found: str
    seconds: float
    #: rows loaded (a reload's)
    rows: int


class StoreEvents(AccumulatorParam):
    """An accumulator of ``StoreEvent``s, one per task that opened a store."""

    def zero(self, value: list) -> list:
        return []

    def addInPlace(self, a: list, b: list) -> list:
        a.extend(b)
        return a


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f".{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def opened(at: StoreAt, i: int, operator: str, events, task: str) -> SubtaskStore:
    """Subtask ``i``'s store, open, holding ``at.version``: at it exactly for an ``"apply"`` task (an epoch starts
    there), a later version left in place for a ``"read"`` as of it. Reports a hit or a reload to ``events``."""
    directory = at.directory(i)
    with _locked(directory):
        store = SubtaskStore(directory, at.layout)
        if not at.reload and _holds(store, at.version):
            store.open()
            if task == "apply" and store.info().version != at.version:
                store.rollback(at.version)
            if events is not None:
                events.add([StoreEvent(operator, i, at.version, task, "hit", 0.0, 0)])
            return store
        t0 = time.perf_counter()
        rows = store.load(_chain(at, i), at.version)
        _remove_other_layouts(directory)
        if events is not None:
            events.add([StoreEvent(operator, i, at.version, task, "reload", time.perf_counter() - t0, rows)])
        return store.open()


def _remove_other_layouts(directory: Path) -> None:
    """Delete this operator's stores of other layouts (another parallelism, key-group count or state shape) on
    this executor: no run opens them again (a run that changes back loads anew). One run per job at a time (its
    lease), so none is in use."""
    for layout in directory.parent.parent.iterdir():
        if layout.is_dir() and layout != directory.parent:
            shutil.rmtree(layout, ignore_errors=True)


def _holds(store: SubtaskStore, version: int) -> bool:
    try:
        with store:
            info = store.info()
            return info.floor <= version <= info.version
    except (StoreVersionError, sqlite3.Error):
        return False


def _chain(at: StoreAt, i: int) -> Iterator[pa.RecordBatch]:
    """Subtask ``i``'s rows at ``at.version`` from its files, sorted by key (SQLite's B-tree fills in order)."""
    if at.files is None:
        raise StoreVersionError(
            f"the store of subtask {i} in {at.directory(i)} is not at version {at.version}, and no files rebuild it "
            "before its snapshot is written: this run stops, and the next one restores it from its checkpoint")
    keys = list(at.layout.keys)
    tables = [_read(f, at.layout.schema) for f in at.files[i] if f.rows]
    if not tables:
        return iter(())
    rows = pa.concat_tables(tables)
    if len(tables) > 1:
        rows = newest_per_key(rows, keys)
    return iter(rows.sort_by([(k, "ascending") for k in keys]).to_batches())


def _read(file: StateFile, schema: pa.Schema) -> pa.Table:
    """One subtask's files at one checkpoint, checked: their rows against the ack, and (sealed) each file's
    sha256 against its manifest."""
    what = f"state file {file.uri} of checkpoint {file.checkpoint_id}"
    fs, folder = state_files.filesystem(file.uri)
    try:
        parts = sorted(f.path for f in fs.get_file_info(pafs.FileSelector(folder))
                       if f.type == pafs.FileType.File and not Path(f.path).name.startswith((".", "_")))
    except (FileNotFoundError, OSError) as exc:
        raise RuntimeError(f"{INTEGRITY}{what} is missing or unreadable: {str(exc).splitlines()[0]}") from None
    listed = _manifest(fs, folder, what) if file.sealed else None
    tables = []
    for part in parts:
        data = fs.open_input_stream(part).readall()
        if listed is not None:
            rel = f"{Path(folder).name}/{Path(part).name}"
            if rel not in listed:
                raise RuntimeError(f"{INTEGRITY}{what} is corrupt: {part} is not in its manifest")
            size, sha256 = listed.pop(rel)
            if len(data) != size:
                raise RuntimeError(f"{INTEGRITY}{what} is corrupt: {part} has {len(data):,} bytes, "
                                   f"{size:,} were acked")
            if hashlib.sha256(data).hexdigest() != sha256:
                raise RuntimeError(f"{INTEGRITY}{what} is corrupt: {part} has other content than was acked "
                                   "(sha256 differs from its manifest)")
        try:
            tables.append(pq.read_table(pa.BufferReader(data)).select(schema.names).cast(schema))
        except (pa.ArrowException, OSError) as exc:
            raise RuntimeError(f"{INTEGRITY}cannot read {what}: {str(exc).splitlines()[0]}") from None
    if listed:
        raise RuntimeError(f"{INTEGRITY}{what} is corrupt: {', '.join(sorted(listed))} missing")
    rows = sum(t.num_rows for t in tables)
    if rows != file.rows:
        raise RuntimeError(f"{INTEGRITY}{what} is corrupt: {rows} rows, the catalog says {file.rows}")
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _manifest(fs: pafs.FileSystem, folder: str, what: str) -> dict[str, tuple[int, str]]:
    """The bytes and sha256 of each file of subtask folder ``folder`` that its operator folder's manifest lists."""
    operator = str(Path(folder).parent)
    try:
        entries = json.loads(fs.open_input_stream(f"{operator}/{MANIFEST}").readall())["files"]
    except (FileNotFoundError, OSError, ValueError, KeyError) as exc:
        raise RuntimeError(f"{INTEGRITY}{what}: its manifest {operator}/{MANIFEST} is missing or unreadable "
                           f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    prefix = Path(folder).name + "/"
    return {e["path"]: (e["bytes"], e["sha256"]) for e in entries if e["path"].startswith(prefix)}
