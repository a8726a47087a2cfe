"""A SQL table sink target: the table the sink creates from its declared columns, in any database.

The table has the declared columns (the key is the primary key of a keyed
sink) and ``checkpoint_id``, the checkpoint that last wrote the row. Its commit
record is a row of ``absreplay_sink_commits`` (job, sink, checkpoint_id) in the
same database, changed in the same transaction as the rows: a commit retried
after a crash finds its record and writes nothing. In the catalog database the
caller passes its own session (``commit_in``), so rows, commit record,
transaction status and high-water marks change in one transaction.

Upserts: PostgreSQL copies the rows into a temporary table and upserts them in
one statement; SQLite runs one prepared INSERT ... ON CONFLICT for all rows, in key order.
Deletes: a checkpoint's tombstones (``coordinator.sinks.deletes``) delete their
keys' rows in the same transaction, after its upserts.
"""

from __future__ import annotations

import io
from collections.abc import Collection
from functools import cached_property

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from coordinator.errors import SinkSchemaError
from coordinator.sinks import deletes
from coordinator.types import sql_type

COMMITS = "absreplay_sink_commits"


def _kind(t: sa.types.TypeEngine) -> str:
    """What a column holds, for comparing a table's column with the declared one: the Python type of its
    values, since each database reflects the type the sink creates under its own name (the DateTime it
    creates comes back as PostgreSQL's TIMESTAMP, SQLite's DATETIME). A type of no known Python type: its name."""
    try:
        py = t.python_type
    except NotImplementedError:
        py = object
    return str(t).lower() if py is object else py.__name__


_COPY_ESCAPES = str.maketrans({"\\": r"\\", "\t": r"\t", "\n": r"\n", "\r": r"\r"})


def _copy_text(values: list) -> list[str]:
    """A column's values as COPY's text format reads them: NULL is ``\\N``, so an empty string stays one
    (in its CSV format an empty field is NULL), and a string's backslashes, tabs and line breaks are escaped."""
    return [r"\N" if v is None else v.translate(_COPY_ESCAPES) if isinstance(v, str) else str(v) for v in values]


class SqlTableTarget:
    #: in the catalog, several checkpoints' commits in one settle are written as one
    #: (``coordinator.sinks.transactions.write_merged``): rows carry their own checkpoint id
    merges_commits = True

    def __init__(self, table: str, schema: pa.Schema, key: tuple[str, ...] | None, url: str | None,
                 catalog_url: str) -> None:
        self.table, self.schema, self.key = table, schema, key
        self.url = url or catalog_url
        self.in_catalog = not url
        self.columns = tuple(schema.names)
        self.values = tuple(c for c in self.columns if c not in (key or ()))
        metadata = sa.MetaData()
        self._table = sa.Table(
            table, metadata,
            *(sa.Column(f.name, self._sql(f), primary_key=f.name in (key or ()), nullable=f.name not in (key or ()))
              for f in schema),
            sa.Column("checkpoint_id", sa.BigInteger, nullable=False),
            # SQLite: a keyed table is its primary key's B-tree alone, not a rowid table beside an index on the
            # key that every upsert also writes (ignored elsewhere; a table that exists stays as it is)
            sqlite_with_rowid=key is None,
        )
        self._commits = sa.Table(
            COMMITS, metadata,
            sa.Column("job", sa.String(64), primary_key=True),
            sa.Column("sink", sa.String(64), primary_key=True),
            sa.Column("checkpoint_id", sa.BigInteger, nullable=False),
        )

    def _sql(self, f: pa.Field):
        name = {pa.string(): "string", pa.int64(): "long", pa.int32(): "int", pa.float64(): "double",
                pa.bool_(): "boolean"}.get(f.type, "timestamp" if pa.types.is_timestamp(f.type) else str(f.type))
        return sql_type(name, f"sink table {self.table}, column {f.name}")

    def describe(self) -> str:
        where = "the catalog database" if self.in_catalog else sa.engine.make_url(self.url).render_as_string()
        return f"SQL table {self.table} in {where}"

    @cached_property
    def engine(self) -> sa.Engine:
        from coordinator.catalog.db import make_engine

        return make_engine(self.url)

    # -- the protocol ----------------------------------------------------------------------------
    def prepare(self) -> None:
        with self.engine.begin() as conn:
            self.prepare_in(conn)

    def committed_through(self, job: str, sink: str) -> int | None:
        with self.engine.connect() as conn:
            return self.committed_in(conn, job, sink)

    def commit(self, job: str, sink: str, checkpoint_id: int, rows: pa.Table) -> bool:
        with self.engine.begin() as conn:
            return self.commit_in(conn, job, sink, checkpoint_id, rows)

    def revert(self, job: str, sink: str, checkpoint_id: int, rows: pa.Table, later: Collection[int]) -> int:
        with self.engine.begin() as conn:
            return self.revert_in(conn, job, sink, checkpoint_id, rows, later)

    def read(self) -> pa.Table:
        with self.engine.connect() as conn:
            if not sa.inspect(conn).has_table(self.table):
                return self.schema.empty_table()
            found = conn.execute(sa.select(*(self._table.c[c] for c in self.columns))).all()
        return pa.Table.from_pylist([dict(zip(self.columns, r, strict=True)) for r in found], schema=self.schema)

    # -- in a given transaction (the catalog's, for a table in the catalog database) ---------------
    def prepare_in(self, conn: Connection | Session) -> None:
        conn = conn.connection() if isinstance(conn, Session) else conn
        inspector = sa.inspect(conn)
        if inspector.has_table(self.table):
            found = {c["name"]: c["type"] for c in inspector.get_columns(self.table)}
            wanted = {c.name: c.type for c in self._table.columns}
            if set(found) != set(wanted):
                raise SinkSchemaError(
                    f"sink table {self.table} exists with columns {', '.join(sorted(found))}; the job declares "
                    f"{', '.join(sorted(wanted))}: rename the table or the sink's columns")
            for name, t in wanted.items():
                if _kind(found[name]) != _kind(t):
                    raise SinkSchemaError(f"sink table {self.table}: column {name} is "
                                          f"{found[name].compile(dialect=conn.dialect)}, the job declares "
                                          f"{t.compile(dialect=conn.dialect)}")
        self._table.metadata.create_all(conn, checkfirst=True)

    def evolve_in(self, conn: Connection | Session) -> list[str]:
        """The table made to hold the declared columns (an upgrade, ``coordinator.upgrades.upgrade``):
        columns declared since are added, empty until rows are restated; columns no longer declared are
        dropped. A column of another type is not changed here (``prepare_in`` names it). Returns what it did."""
        conn = conn.connection() if isinstance(conn, Session) else conn
        inspector = sa.inspect(conn)
        if not inspector.has_table(self.table):
            return []
        found = {c["name"] for c in inspector.get_columns(self.table)}
        quote = conn.dialect.identifier_preparer.quote
        done = []
        for column in self._table.columns:
            if column.name not in found:
                conn.execute(sa.text(f"ALTER TABLE {quote(self.table)} ADD COLUMN {quote(column.name)} "
                                     f"{column.type.compile(dialect=conn.dialect)}"))
                done.append(f"added {column.name}")
        for name in sorted(found - {c.name for c in self._table.columns}):
            conn.execute(sa.text(f"ALTER TABLE {quote(self.table)} DROP COLUMN {quote(name)}"))
            done.append(f"dropped {name}")
        return done

    def committed_in(self, conn: Connection | Session, job: str, sink: str) -> int | None:
        conn = conn.connection() if isinstance(conn, Session) else conn
        if not sa.inspect(conn).has_table(COMMITS):
            return None
        c = self._commits.c
        return conn.scalar(sa.select(c.checkpoint_id).where(c.job == job, c.sink == sink))

    def commit_in(self, conn: Connection | Session, job: str, sink: str, checkpoint_id: int, rows: pa.Table) -> bool:
        conn = conn.connection() if isinstance(conn, Session) else conn
        self.prepare_in(conn)
        done = self.committed_in(conn, job, sink)
        if done is not None and done >= checkpoint_id:
            return False
        upserts, tombstones = deletes.split(rows)
        self.upsert(conn, checkpoint_id, upserts)
        self.delete_keys(conn, tombstones)
        self._record(conn, job, sink, checkpoint_id)
        return True

    def delete_keys(self, conn: Connection, tombstones: pa.Table) -> int:
        """Delete the rows of the keys of ``tombstones`` (keys a keyed operator deleted); returns how many were there."""
        if tombstones.num_rows == 0 or self.key is None:
            return 0
        t = self._table
        keys = zip(*(tombstones.column(c).to_pylist() for c in self.key), strict=True)
        result = conn.execute(sa.delete(t).where(*(t.c[c] == sa.bindparam(f"k{i}") for i, c in enumerate(self.key))),
                              [{f"k{i}": v for i, v in enumerate(k)} for k in keys])
        return result.rowcount

    def revert_in(self, conn: Connection | Session, job: str, sink: str, checkpoint_id: int,
                  rows: pa.Table, later: Collection[int]) -> int:
        """Make the table hold exactly ``rows`` (key, values and ``updated``, the checkpoint that
        last changed each): keys it lacks are deleted, rows whose values differ rewritten, whatever
        checkpoint stamped them; an append table loses the rows of the checkpoints ``later`` (of the
        epochs after this one's). The commit record goes back to ``checkpoint_id``."""
        conn = conn.connection() if isinstance(conn, Session) else conn
        self.prepare_in(conn)
        if self.key is None:  # an append sink: what the later epochs' checkpoints appended goes, whatever their ids
            removed = conn.execute(sa.delete(self._table).where(
                self._table.c.checkpoint_id.in_(sorted(later)))).rowcount
            self._record(conn, job, sink, checkpoint_id)
            return removed
        n = len(self.key)
        target: dict[tuple, tuple] = {}
        if rows.num_rows:
            keys = zip(*(rows.column(c).to_pylist() for c in self.key), strict=True)
            values = zip(*(rows.column(c).to_pylist() for c in self.values), strict=True)
            target = dict(zip(keys, values, strict=True))
        t = self._table
        current = {tuple(r[:n]): tuple(r[n:])
                   for r in conn.execute(sa.select(*(t.c[c] for c in (*self.key, *self.values)))).all()}
        gone = [k for k in current if k not in target]
        if gone:
            conn.execute(sa.delete(t).where(*(t.c[c] == sa.bindparam(f"k{i}") for i, c in enumerate(self.key))),
                         [{f"k{i}": v for i, v in enumerate(k)} for k in gone])
        back = {k for k, v in target.items() if current.get(k) != v}
        if back:
            keys = rows.select(list(self.key)).to_pylist()
            changed = rows.filter(pa.array([tuple(k.values()) in back for k in keys]))
            self.upsert(conn, checkpoint_id,
                        changed.select(list(self.columns)).append_column("checkpoint_id", changed.column("updated")))
        self._record(conn, job, sink, checkpoint_id)
        return len(gone) + len(back)

    def _record(self, conn: Connection, job: str, sink: str, checkpoint_id: int) -> None:
        c = self._commits.c
        updated = conn.execute(sa.update(self._commits).where(c.job == job, c.sink == sink)
                               .values(checkpoint_id=checkpoint_id)).rowcount
        if not updated:
            conn.execute(sa.insert(self._commits).values(job=job, sink=sink, checkpoint_id=checkpoint_id))

    def upsert(self, conn: Connection, checkpoint_id: int, rows: pa.Table) -> None:
        """Insert or replace rows (the declared columns), stamped with the checkpoint (or with each
        row's own ``checkpoint_id`` column when ``rows`` has one)."""
        if rows.num_rows == 0:
            return
        cols = (*self.columns, "checkpoint_id")
        copied = conn.dialect.name == "postgresql"  # else one prepared upsert per row (SQLite)
        if self.key is not None and not copied:
            # in key order, SQLite's upserts walk its primary key's B-tree from one end to the other instead
            # of jumping about it, touching each page once
            rows = rows.sort_by([(c, "ascending") for c in self.key])
        if "checkpoint_id" in rows.column_names:
            data = [rows.column(c).to_pylist() for c in cols]
        else:
            data = [rows.column(c).to_pylist() for c in self.columns] + [[checkpoint_id] * rows.num_rows]
        raw = conn.connection.dbapi_connection
        quoted = ", ".join(f'"{c}"' for c in cols)
        if self.key is None:
            conflict = ""
        else:
            updates = ", ".join(f'"{c}" = excluded."{c}"' for c in (*self.values, "checkpoint_id"))
            key = ", ".join(f'"{c}"' for c in self.key)
            conflict = f'ON CONFLICT ({key}) DO UPDATE SET {updates}'
        if copied:
            # COPY into a temporary table, then one set-based upsert: far faster than row inserts
            buf = io.StringIO("".join("\t".join(r) + "\n" for r in zip(*map(_copy_text, data))))
            with raw.cursor() as cur:
                cur.execute(f'CREATE TEMP TABLE IF NOT EXISTS _abs_upsert (LIKE "{self.table}") ON COMMIT DROP')
                cur.copy_expert(f"COPY _abs_upsert ({quoted}) FROM STDIN", buf)
                cur.execute(f'INSERT INTO "{self.table}" ({quoted}) SELECT {quoted} FROM _abs_upsert {conflict}')
                cur.execute("DROP TABLE _abs_upsert")
        else:
            marks = ", ".join("?" for _ in cols)
            cur = raw.cursor()
            cur.executemany(f'INSERT INTO "{self.table}" ({quoted}) VALUES ({marks}) {conflict}', zip(*data))
            cur.close()
