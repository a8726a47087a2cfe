"""One subtask's keyed aggregate state in a local SQLite file: per-key reads and writes, versioned.

What Flink's RocksDB backend is to a task: the state lives beside the task, and an
epoch reads and writes only the keys it touches, so its cost follows the epoch,
not the state. The snapshots (Parquet under the state root, ``spark_jobs.run.snapshot``)
stay the durable truth; a store is a cache of them that the next run reuses when
it is exactly at the checkpoint restored (``spark_jobs.state.stores.provider``).

Versions are checkpoint ids. ``apply(versions, prev)`` folds the contributions
of one epoch, or of several in order (a catch-up), into the state at ``prev`` in
one transaction (``spark_jobs.state.stores.fold``): it writes each touched key's last
row, records as undo of each version v the rows its epoch replaced (or their
absence), one Arrow stream per version, and sets the version to the last. Undo
makes the store multi-version for the last ``KEEP`` versions: a read ``as of``
an older version (the asynchronous snapshot of epoch v while epoch v+1 is
applied already) takes a key's pre-image from the oldest undo newer than it,
and a restore to an older checkpoint rolls back instead of reloading.

Layout: ``<dir>/subtask-<i>/CURRENT`` names the generation file in use; a bulk
load writes a new generation and swaps CURRENT atomically, so a crash leaves
the old store or the new one, never half of one. No Spark here.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from coordinator.checkpoints.manifests import fsync
from spark_jobs.state.stores.fold import fold

#: the layout of a store's file (a store of another is not opened: its run loads a new one)
FORMAT = 2
#: versions whose undo is kept: snapshots in flight (at most 2) and one rollback at restore
KEEP = 4
FETCH_ROWS = 65_536
#: the parameters one statement binds at most (SQLite's default limit is 32,766)
MAX_VARIABLES = 30_000
#: an undo row's flag: the key had a row before the epoch (else the epoch added it)
PRESENT = "__present"
#: Arrow types a store keeps as they are (SQLite's integers, reals and texts)
SUPPORTED = (pa.int64(), pa.int32(), pa.int16(), pa.int8(), pa.float64(), pa.float32(), pa.string(), pa.bool_())


class StoreVersionError(RuntimeError):
    """A store is not at a version the operation can start from."""


@dataclass(frozen=True)
class Layout:
    """A store's columns: the key's, then the values (``updated`` last), and how contributions merge."""

    schema: pa.Schema
    keys: tuple[str, ...]
    #: value column -> sum | min | max | first (count and a mean's hidden sum and count are sums)
    merges: tuple[tuple[str, str], ...]
    #: mean column -> (its hidden sum column, its hidden count column)
    means: tuple[tuple[str, str, str], ...] = ()

    @property
    def columns(self) -> list[str]:
        return self.schema.names


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class StoreInfo:
    version: int
    #: the oldest version it can still be read as of, or rolled back to
    floor: int
    rows: int


class SubtaskStore:
    """A subtask's store; ``open`` it, use it, ``close`` it (one connection, one thread)."""

    def __init__(self, directory: str | Path, layout: Layout) -> None:
        self.dir = Path(directory)
        self.layout = layout
        self.con: sqlite3.Connection | None = None

    # -- files ---------------------------------------------------------------------------------------
    @property
    def current_file(self) -> Path | None:
        try:
            name = (self.dir / "CURRENT").read_text().strip()
        except FileNotFoundError:
            return None
        path = self.dir / name
        return path if path.exists() else None

    def open(self) -> SubtaskStore:
        path = self.current_file
        if path is None:
            raise StoreVersionError(f"no store in {self.dir}")
        self.con = _connect(path)
        return self

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None

    def __enter__(self) -> SubtaskStore:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _holding(self, version: int) -> StoreInfo:
        """The store's info, if it can be read as of ``version`` or rolled back to it."""
        info = self.info()
        if not info.floor <= version <= info.version:
            raise StoreVersionError(f"store {self.dir} holds versions {info.floor}..{info.version}, not {version}")
        return info

    def info(self) -> StoreInfo:
        version, floor, rows = self.con.execute("SELECT version, floor, rows FROM meta").fetchone()
        return StoreInfo(version, floor, rows)

    # -- bulk load -----------------------------------------------------------------------------------
    def load(self, batches: Iterable[pa.RecordBatch], version: int) -> int:
        """A new generation holding exactly these rows, at ``version``; returns its row count."""
        self.dir.mkdir(parents=True, exist_ok=True)
        name = f"gen-{uuid.uuid4().hex}.sqlite"
        path = self.dir / name
        con = sqlite3.connect(path, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=OFF")
            con.execute("PRAGMA synchronous=OFF")
            self._create(con)
            con.execute("BEGIN")
            insert = self._upsert_sql("state", self.layout.columns)
            rows = 0
            for batch in batches:
                if batch.num_rows:
                    con.executemany(insert, _tuples(batch.select(self.layout.columns)))
                    rows += batch.num_rows
            con.execute("INSERT INTO meta VALUES (0, ?, ?, ?)", (version, version, rows))
            con.execute("INSERT INTO versions VALUES (?)", (version,))
            con.execute("COMMIT")
            con.execute("PRAGMA journal_mode=WAL")
        except BaseException:
            con.close()
            path.unlink(missing_ok=True)
            raise
        con.close()
        fsync(path)
        old = self.current_file
        tmp = self.dir / f"CURRENT.{uuid.uuid4().hex}"
        tmp.write_text(name)
        fsync(tmp)
        os.replace(tmp, self.dir / "CURRENT")
        fsync(self.dir)
        if old is not None:
            for suffix in ("", "-wal", "-shm"):
                Path(str(old) + suffix).unlink(missing_ok=True)
        return rows

    def _create(self, con: sqlite3.Connection) -> None:
        cols = ", ".join(q(c) for c in self.layout.columns)
        keys = ", ".join(q(k) for k in self.layout.keys)
        con.execute(f"CREATE TABLE state ({cols}, PRIMARY KEY ({keys})) WITHOUT ROWID")
        # a version's undo: the rows its epoch replaced, one Arrow IPC stream (written and read whole)
        con.execute("CREATE TABLE undo (version INTEGER PRIMARY KEY, rows BLOB NOT NULL)")
        con.execute("CREATE TABLE versions (version INTEGER PRIMARY KEY)")
        con.execute("CREATE TABLE meta (id INTEGER PRIMARY KEY CHECK (id = 0), version INTEGER, floor INTEGER,"
                    " rows INTEGER)")

    # -- epochs -------------------------------------------------------------------------------------
    def apply(self, contributions: pa.Table, versions: int | Sequence[int], prev: int) -> pa.Table:
        """Fold the contributions of epochs ``versions`` (one, or several in order: a catch-up; a row's
        ``updated`` is its epoch, one row per key and epoch) into the state at ``prev``, in one
        transaction. Returns each touched key's row after each epoch. A retried task (the store at the
        last version already): rolled back to ``prev`` and applied again, so it returns the same rows."""
        versions = [versions] if isinstance(versions, int) else list(versions)
        epochs = contributions.column("updated")
        if contributions.num_rows and not pc.all(pc.is_in(epochs, value_set=pa.array(versions, epochs.type))).as_py():
            # a record no epoch claimed (``epoch_source.epoch_of_file``) would be folded nowhere: fail instead
            strays = sorted(set(epochs.to_pylist()) - set(versions), key=str)
            raise StoreVersionError(f"store {self.dir}: contributions of epochs {strays} given to epochs {versions}")
        con, lay = self.con, self.layout
        con.execute("BEGIN IMMEDIATE")
        try:
            info = self.info()
            if info.version == versions[-1] and info.floor <= prev < info.version:
                self._roll_back_to(prev)
                info = self.info()
            if info.version != prev:
                raise StoreVersionError(f"store {self.dir} is at version {info.version}, epoch {versions[0]} starts "
                                        f"from {prev}")
            folded = fold(lay.schema, lay.keys, dict(lay.merges), {m: (s, n) for m, s, n in lay.means},
                          self._stored(contributions), contributions)
            con.executemany(self._upsert_sql("state", lay.columns), _tuples(folded.final))
            con.executemany("INSERT INTO versions VALUES (?)", [(v,) for v in versions])
            floor = con.execute("SELECT min(version) FROM (SELECT version FROM versions ORDER BY version DESC "
                                "LIMIT ?)", (KEEP,)).fetchone()[0]
            # the undo of the versions kept: each touched key's row before the epoch, or its absence
            undo, present, undo_versions = folded.before(lay.keys, floor)
            undo = undo.append_column(PRESENT, pa.array(present))
            for v in np.unique(undo_versions):
                con.execute("INSERT INTO undo VALUES (?, ?)", (int(v), _ipc(undo.filter(pa.array(undo_versions == v)))))
            con.execute("DELETE FROM versions WHERE version < ?", (floor,))
            con.execute("DELETE FROM undo WHERE version <= ?", (floor,))
            con.execute("UPDATE meta SET version = ?, floor = max(floor, ?), rows = rows + ?",
                        (versions[-1], floor, folded.added))
            con.execute("COMMIT")
            return folded.changes
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise

    def _stored(self, contributions: pa.Table) -> pa.Table:
        """The rows the store holds of the keys in ``contributions``."""
        keys = list(self.layout.keys)
        # each key once, in key order (SQLite's B-tree is walked in order)
        distinct = contributions.select(keys).group_by(keys).aggregate([]).sort_by([(k, "ascending") for k in keys])
        return pa.Table.from_batches(list(self._rows_of(distinct)), self.layout.schema)

    def _rows_of(self, keys: pa.Table) -> Iterator[pa.RecordBatch]:
        """The store's rows of these keys (as many as one statement binds at a time)."""
        names = self.layout.keys
        on = " AND ".join(f"s.{q(k)} = v.column{j}" for j, k in enumerate(names, 1))
        select = ", ".join("s." + q(c) for c in self.layout.columns)
        step = MAX_VARIABLES // len(names)
        for start in range(0, keys.num_rows, step):
            chunk = keys.slice(start, step)
            values = ", ".join(["(" + ", ".join("?" * len(names)) + ")"] * chunk.num_rows)
            params = [value for row in _tuples(chunk) for value in row]
            yield from _batches(self.con.execute(f"SELECT {select} FROM (VALUES {values}) v JOIN state s ON {on}",
                                                 params), self.layout.schema)

    # -- reads as of a version -----------------------------------------------------------------------
    def rows_as_of(self, version: int, since: int | None = None) -> Iterator[pa.RecordBatch]:
        """Every row of the state at ``version`` (``since``: only those changed after that version),
        read in one transaction: an apply of a later version meanwhile is not seen."""
        con, cols = self.con, self.layout.columns
        con.execute("BEGIN")
        try:
            info = self._holding(version)
            # a key changed after ``version`` has updated > version here and its row as of then in undo
            changed = "" if since is None else " AND s.updated > :since"
            sql = f"SELECT {', '.join('s.' + q(c) for c in cols)} FROM state s WHERE s.updated <= :v{changed}"
            params = {"v": version, "since": since if since is not None else -1}
            yield from _batches(con.execute(sql, params), self.layout.schema)
            if version < info.version:
                # a key changed after ``version``: its row then is in the oldest undo newer than it
                older = self._undo_after(version)
                kept = older.filter(older.column(PRESENT))
                if since is not None:
                    kept = kept.filter(pc.fill_null(pc.greater(kept.column("updated"), since), False))
                yield from kept.select(cols).to_batches()
        finally:
            con.execute("COMMIT")

    def rollback(self, version: int) -> None:
        """Back to ``version`` (at or above the floor): every newer version's undo, newest first."""
        con = self.con
        con.execute("BEGIN IMMEDIATE")
        try:
            self._roll_back_to(version)
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise

    def _roll_back_to(self, version: int) -> None:
        con, lay = self.con, self.layout
        info = self._holding(version)
        newer = con.execute("SELECT version, rows FROM undo WHERE version > ? ORDER BY version DESC",
                            (version,)).fetchall()
        where = " AND ".join(f"{q(k)} = ?" for k in lay.keys)
        for _, blob in newer:
            rows = _from_ipc(blob)
            con.executemany(f"DELETE FROM state WHERE {where}", _tuples(rows.select(list(lay.keys))))
            con.executemany(self._upsert_sql("state", lay.columns),
                            _tuples(rows.filter(rows.column(PRESENT)).select(lay.columns)))
        con.execute("DELETE FROM undo WHERE version > ?", (version,))
        con.execute("DELETE FROM versions WHERE version > ?", (version,))
        rows = con.execute("SELECT count(*) FROM state").fetchone()[0] if version < info.version else info.rows
        con.execute("UPDATE meta SET version = ?, rows = ?", (version, rows))

    def _undo_after(self, version: int) -> pa.Table:
        """Each key's row before the first epoch after ``version`` that changed it, with ``present``."""
        blobs = self.con.execute("SELECT rows FROM undo WHERE version > ? ORDER BY version", (version,)).fetchall()
        schema = self.layout.schema.append(pa.field(PRESENT, pa.bool_()))
        undo = pa.concat_tables([_from_ipc(b) for (b,) in blobs]) if blobs else schema.empty_table()
        keys = list(self.layout.keys)
        first = undo.append_column("__i", pa.array(range(undo.num_rows), pa.int64())).group_by(
            keys, use_threads=False).aggregate([("__i", "min")])
        return undo.take(first.column("__i_min"))

    @staticmethod
    def _upsert_sql(table: str, columns: Sequence[str]) -> str:
        return (f"INSERT OR REPLACE INTO {table} ({', '.join(q(c) for c in columns)}) "
                f"VALUES ({', '.join('?' for _ in columns)})")


def _ipc(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return sink.getvalue().to_pybytes()


def _from_ipc(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(blob).read_all()


def _connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None, timeout=60)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("PRAGMA cache_size=-65536")
    con.execute("PRAGMA temp_store=MEMORY")
    return con


def _tuples(batch: pa.RecordBatch | pa.Table) -> Iterator[tuple]:
    columns = []
    for col in batch.columns:
        if pa.types.is_boolean(col.type):
            col = col.cast(pa.int8())
        columns.append(col.to_pylist())
    return zip(*columns, strict=True)


def _batches(cursor: sqlite3.Cursor, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    while True:
        rows = cursor.fetchmany(FETCH_ROWS)
        if not rows:
            return
        columns = list(zip(*rows, strict=True))
        arrays = []
        for field, values in zip(schema, columns, strict=True):
            if pa.types.is_boolean(field.type):
                arrays.append(pa.array(values, pa.int8()).cast(pa.bool_()))
            else:
                arrays.append(pa.array(values, field.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
