"""One subtask's keyed aggregate state in a local SQLite file: per-key reads and writes, versioned.

What Flink's RocksDB backend is to a task: the state lives beside the task, and an
epoch reads and writes only the keys it touches, so its cost follows the epoch,
not the state. The snapshots (Parquet under the state root, ``spark_jobs.snapshot``)
stay the durable truth; a store is a cache of them that the next run reuses when
it is exactly at the checkpoint restored (``spark_jobs.store_backend``).

Versions are checkpoint ids. ``apply(v, prev)`` folds epoch v's contributions
into the state at ``prev`` in one transaction, records each touched key's
previous row (or its absence) as undo of v, and sets the version to v. Undo
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

import pyarrow as pa

from coordinator.checkpoints.manifests import fsync

#: versions whose undo is kept: snapshots in flight (at most 2) and one rollback at restore
KEEP = 4
FETCH_ROWS = 65_536
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
        con.execute(f"CREATE TABLE undo ({cols}, version INTEGER, present INTEGER, PRIMARY KEY ({keys}, version))"
                    " WITHOUT ROWID")
        con.execute("CREATE INDEX undo_version ON undo (version)")
        con.execute("CREATE TABLE versions (version INTEGER PRIMARY KEY)")
        con.execute("CREATE TABLE meta (id INTEGER PRIMARY KEY CHECK (id = 0), version INTEGER, floor INTEGER,"
                    " rows INTEGER)")

    # -- one epoch -----------------------------------------------------------------------------------
    def apply(self, contributions: pa.Table, version: int, prev: int) -> pa.Table:
        """Fold epoch ``version``'s contributions (one row per key) into the state at ``prev`` and return
        the touched keys' new rows. Applied already (a retried task): the same rows, nothing changed."""
        con, lay = self.con, self.layout
        con.execute("BEGIN IMMEDIATE")
        try:
            info = self.info()
            self._keys_table(contributions)
            if info.version == version:
                con.execute("ROLLBACK")
                return self._read_touched()
            if info.version != prev:
                raise StoreVersionError(f"store {self.dir} is at version {info.version}, epoch {version} starts "
                                        f"from {prev}")
            cols = ", ".join(q(c) for c in lay.columns)
            on = " AND ".join(f"s.{q(k)} = c.{q(k)}" for k in lay.keys)
            con.execute(f"INSERT INTO undo ({cols}, version, present) "
                        f"SELECT {', '.join('s.' + q(c) for c in lay.columns)}, ?, 1 FROM c JOIN state s ON {on}",
                        (version,))
            keys = ", ".join(q(k) for k in lay.keys)
            added = con.execute(f"INSERT INTO undo ({keys}, version, present) SELECT "
                                f"{', '.join('c.' + q(k) for k in lay.keys)}, ?, 0 FROM c "
                                f"WHERE NOT EXISTS (SELECT 1 FROM state s WHERE {on})", (version,)).rowcount
            con.execute(f"INSERT OR REPLACE INTO state ({cols}) SELECT {', '.join(self._merged())} "
                        f"FROM c LEFT JOIN state s ON {on}")
            con.execute("INSERT INTO versions VALUES (?)", (version,))
            floor = con.execute("SELECT min(version) FROM (SELECT version FROM versions ORDER BY version DESC "
                                "LIMIT ?)", (KEEP,)).fetchone()[0]
            con.execute("DELETE FROM versions WHERE version < ?", (floor,))
            con.execute("DELETE FROM undo WHERE version <= ?", (floor,))
            con.execute("UPDATE meta SET version = ?, floor = max(floor, ?), rows = rows + ?",
                        (version, floor, added))
            out = self._read_touched()
            con.execute("COMMIT")
            return out
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise

    def _merged(self) -> list[str]:
        lay = self.layout
        merges = dict(lay.merges)
        means = {m: (s, n) for m, s, n in lay.means}
        exprs = []
        for c in lay.columns:
            if c in lay.keys:
                exprs.append(f"c.{q(c)}")
            elif c in means:
                s, n = means[c]
                exprs.append(f"CAST({_merge(s, merges[s])} AS REAL) / ({_merge(n, merges[n])})")
            elif c == "updated":
                exprs.append("c.updated")
            else:
                exprs.append(_merge(c, merges[c]))
        return exprs

    def _keys_table(self, contributions: pa.Table) -> None:
        con, cols = self.con, self.layout.columns
        con.execute("DROP TABLE IF EXISTS temp.c")
        keys = ", ".join(q(k) for k in self.layout.keys)
        con.execute(f"CREATE TEMP TABLE c ({', '.join(q(c) for c in cols)}, PRIMARY KEY ({keys})) WITHOUT ROWID")
        if contributions.num_rows:
            con.executemany(self._upsert_sql("temp.c", cols), _tuples(contributions.select(cols)))

    def _read_touched(self) -> pa.Table:
        on = " AND ".join(f"s.{q(k)} = c.{q(k)}" for k in self.layout.keys)
        cur = self.con.execute(f"SELECT {', '.join('s.' + q(c) for c in self.layout.columns)} FROM c JOIN state s "
                               f"ON {on}")
        return pa.Table.from_batches(list(_batches(cur, self.layout.schema)), self.layout.schema)

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
                first = ("u.version = (SELECT min(w.version) FROM undo w WHERE w.version > :v AND "
                         + " AND ".join(f"w.{q(k)} = u.{q(k)}" for k in self.layout.keys) + ")")
                since_u = "" if since is None else " AND u.updated > :since"
                sql = (f"SELECT {', '.join('u.' + q(c) for c in cols)} FROM undo u "
                       f"WHERE u.version > :v AND u.present = 1 AND {first}{since_u}")
                yield from _batches(con.execute(sql, params), self.layout.schema)
        finally:
            con.execute("COMMIT")

    def rollback(self, version: int) -> None:
        """Back to ``version`` (at or above the floor): every newer version's undo, newest first."""
        con, lay = self.con, self.layout
        cols = ", ".join(q(c) for c in lay.columns)
        on = " AND ".join(f"state.{q(k)} = undo.{q(k)}" for k in lay.keys)
        con.execute("BEGIN IMMEDIATE")
        try:
            info = self._holding(version)
            newer = [v for (v,) in con.execute("SELECT version FROM versions WHERE version > ? ORDER BY version DESC",
                                                (version,))]
            for v in newer:
                con.execute(f"DELETE FROM state WHERE EXISTS (SELECT 1 FROM undo WHERE undo.version = ? AND {on})",
                            (v,))
                con.execute(f"INSERT INTO state ({cols}) SELECT {cols} FROM undo WHERE version = ? AND present = 1",
                            (v,))
                con.execute("DELETE FROM undo WHERE version = ?", (v,))
                con.execute("DELETE FROM versions WHERE version = ?", (v,))
            rows = con.execute("SELECT count(*) FROM state").fetchone()[0] if newer else info.rows
            con.execute("UPDATE meta SET version = ?, rows = ?", (version, rows))
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise

    @staticmethod
    def _upsert_sql(table: str, columns: Sequence[str]) -> str:
        return (f"INSERT OR REPLACE INTO {table} ({', '.join(q(c) for c in columns)}) "
                f"VALUES ({', '.join('?' for _ in columns)})")


def _merge(column: str, how: str) -> str:
    s, c = f"s.{q(column)}", f"c.{q(column)}"
    if how == "first":
        return f"coalesce({s}, {c})"
    both = {"sum": f"{s} + {c}", "min": f"min({s}, {c})", "max": f"max({s}, {c})"}[how]
    return f"CASE WHEN {s} IS NULL THEN {c} WHEN {c} IS NULL THEN {s} ELSE {both} END"


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
