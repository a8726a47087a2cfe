"""Every declared column type on every sink target: a sink commits twice (two finalizes, each with a target
of its own, as two processes make them) to a target it created itself, or to one the user created beforehand
with the natural type for the column, and reads back exactly the values it was given.

The check of an existing target's columns must agree with what the sink itself creates: a timestamp column
once made a SQL table in PostgreSQL refuse every commit after the first. The types are coordinator.types'
own list, so a type added there needs a sample here. Parquet directories are never the user's: the sink
refuses a directory holding files it did not write (tests/sinks/test_sink_targets.py)."""

from __future__ import annotations

import datetime
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import absreplay.api as abs
from coordinator.catalog.db import make_engine
from coordinator.errors import SinkSchemaError
from coordinator.sinks.base import SinkTarget
from coordinator.sinks.delta_table import CHECKPOINT_COLUMN, DeltaTable
from coordinator.sinks.parquet_dir import ParquetDirectory
from coordinator.sinks.sql_table import SqlTableTarget
from coordinator.types import SCALARS, arrow_type
from tests.helpers import cli_ok

JOB, SINK, TABLE = "typed", "out", "typed_out"
UTC = datetime.timezone.utc

#: per declared type, three values: key a gets the first, then the second; key c the third; key b is null
SAMPLES = {
    "string": ("", 'a\ttab, a "quote", a back\\slash, \\N and a\nline', "é"),
    "long": (2**62, -(2**63), 0),
    "int": (-(2**31), 2**31 - 1, 7),
    "double": (0.1, -1e300, float("inf")),
    "boolean": (True, False, True),
    "timestamp": (datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
                  datetime.datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
                  datetime.datetime(2038, 1, 19, 3, 14, 8, 1, tzinfo=UTC)),
}
#: a list of each scalar type: of the first and second values with a null between them, empty, of the third
ARRAYS = {f"array<{t}>": ([first, None, second], [], [third]) for t, (first, second, third) in SAMPLES.items()}
SAMPLES |= ARRAYS

#: the types a user creating the table beforehand would choose, per database
NATURAL_SQL = {
    "postgresql": {"string": ["text", "varchar(200)"], "long": ["bigint"], "int": ["integer"],
                   "double": ["double precision"], "boolean": ["boolean"],
                   "timestamp": ["timestamp with time zone", "timestamp"]},
    "sqlite": {"string": ["TEXT", "VARCHAR(200)"], "long": ["INTEGER", "BIGINT"], "int": ["INTEGER"],
               "double": ["REAL", "DOUBLE"], "boolean": ["BOOLEAN"], "timestamp": ["DATETIME", "TIMESTAMP"]},
}
NATURAL_ARROW = {"string": [pa.string(), pa.large_string()], "long": [pa.int64()], "int": [pa.int32()],
                 "double": [pa.float64()], "boolean": [pa.bool_()],
                 "timestamp": [pa.timestamp("us", tz="UTC"), pa.timestamp("ns", tz="UTC")]}
NATURAL_ARROW |= {f"array<{t}>": [pa.list_(arrow_type(t))] for t in SCALARS}

SQL_TARGETS = [f"sql-{where}-{db}" for where in ("catalog", "other") for db in ("sqlite", "postgresql")]


def cases():
    for declared in (*SCALARS, *ARRAYS):
        for target in (*([] if declared in ARRAYS else SQL_TARGETS), "parquet", "delta"):
            natural = (NATURAL_SQL[target.split("-")[2]][declared] if target.startswith("sql") else
                       NATURAL_ARROW[declared] if target == "delta" else [])
            yield declared, target, None
            yield from ((declared, target, str(n)) for n in natural)


def schema_of(declared: str) -> pa.Schema:
    return pa.schema([("id", pa.string()), ("v", arrow_type(declared))])


def batch(schema: pa.Schema, pairs: list[tuple[str, object]]) -> pa.Table:
    return pa.table({"id": [k for k, _ in pairs], "v": [v for _, v in pairs]}, schema=schema)


class Place:
    """Where a test's target is: ``make()`` is what each finalize makes of the declaration."""

    def __init__(self, target: str, declared: str, key: tuple[str, ...] | None, tmp_path: Path,
                 request: pytest.FixtureRequest) -> None:
        self.target, self.schema, self.key = target, schema_of(declared), key
        self.path = tmp_path / "sink"
        self.catalog_url = self.url = None
        if target.startswith("sql"):
            _, where, db = target.split("-")
            # a PostgreSQL URL as users write it, postgresql://: the sink picks the driver installed
            database = request.getfixturevalue("pg_url") if db == "postgresql" else f"sqlite:///{tmp_path / 'sink.db'}"
            self.catalog_url = database if where == "catalog" else request.getfixturevalue("sqlite_url")
            self.url = None if where == "catalog" else database

    def make(self) -> SinkTarget:
        if self.target == "parquet":
            return ParquetDirectory(self.path, self.schema, self.key)
        if self.target == "delta":
            return DeltaTable(str(self.path), self.schema, self.key)
        return SqlTableTarget(TABLE, self.schema, self.key, self.url, self.catalog_url)

    def commit(self, checkpoint_id: int, rows: pa.Table) -> bool:
        """One finalize's commit, as ``coordinator.sinks.transactions.write`` makes it."""
        target = self.make()
        if getattr(target, "in_catalog", False):
            with Session(make_engine(self.catalog_url)) as s, s.begin():
                return target.commit_in(s, JOB, SINK, checkpoint_id, rows)
        target.prepare()
        return target.commit(JOB, SINK, checkpoint_id, rows)

    def create_as_user(self, natural: str) -> None:
        """The table made beforehand by its user, with ``natural`` for the typed column and the columns the
        sink keeps for itself (docs/jobs.md)."""
        if self.target == "delta":
            v = next(t for types in NATURAL_ARROW.values() for t in types if str(t) == natural)
            fields = [("id", pa.string()), ("v", v)] + ([(CHECKPOINT_COLUMN, pa.int64())] if self.key is None else [])
            deltalake.write_deltalake(str(self.path), pa.schema(fields).empty_table())
            return
        key = ", PRIMARY KEY (id)" if self.key else ""
        engine = make_engine(self.url or self.catalog_url)
        with engine.begin() as c:
            c.execute(sa.text(f"CREATE TABLE {TABLE} (id text{' NOT NULL' if self.key else ''}, v {natural}, "
                              f"checkpoint_id bigint NOT NULL{key})"))
        engine.dispose()


@pytest.mark.parametrize("key", [("id",), None], ids=["keyed", "append"])
@pytest.mark.parametrize(("declared", "target", "natural"), list(cases()))
def test_two_commits_read_back_the_declared_values(tmp_path: Path, request: pytest.FixtureRequest, declared: str,
                                                   target: str, natural: str | None,
                                                   key: tuple[str, ...] | None) -> None:
    place = Place(target, declared, key, tmp_path, request)
    if natural is not None:
        place.create_as_user(natural)
    first, second, third = SAMPLES[declared]
    assert place.commit(1, batch(place.schema, [("a", first), ("b", None)]))
    assert place.commit(2, batch(place.schema, [("a", second), ("c", third)]))
    assert not place.commit(2, batch(place.schema, [("a", first)]))  # a replayed finalize writes nothing
    read = place.make().read()
    assert read.schema == place.schema
    got = sorted(zip(read.column("id").to_pylist(), read.column("v").to_pylist(), strict=True), key=repr)
    if key:
        assert got == [("a", second), ("b", None), ("c", third)]
    else:
        assert got == sorted([("a", first), ("b", None), ("a", second), ("c", third)], key=repr)


@pytest.mark.parametrize("target", SQL_TARGETS)
def test_a_column_of_another_kind_is_refused_by_name(tmp_path: Path, request: pytest.FixtureRequest,
                                                     target: str) -> None:
    place = Place(target, "timestamp", ("id",), tmp_path, request)
    place.create_as_user("text")
    with pytest.raises(SinkSchemaError, match=f"sink table {TABLE}: column v is TEXT, the job declares "
                                              f"(TIMESTAMP WITH TIME ZONE|DATETIME)$"):
        place.commit(1, batch(place.schema, [("a", SAMPLES["timestamp"][0])]))


def test_a_list_column_for_a_sql_table_is_refused_at_declaration() -> None:
    """Not at the first finalize, once the epochs ran: a SQL table has no list type (a Parquet directory and
    a Delta table take one, above)."""
    job = abs.Job("listed")
    events = job.source("events", abs.json_lines({"id": str, "v": list[int]}))
    events.sink("out", abs.SqlTable("listed_out"), columns={"id": str, "v": list[int]})
    events.key_by("id", str).aggregate("per_id", n=abs.count()).sink("per_id_out", abs.SqlTable("listed_per_id"))
    with pytest.raises(ValueError, match="^job 'listed', sink 'out', column 'v': a column of type array<long> "
                                         "cannot go to a SQL table$"):
        job.definition()


# ---- end to end: a timestamp column into a PostgreSQL database that is not the catalog

STAMPED_JOB = '''"""Events with a timestamp into a SQL table in another database than the catalog (tests/sinks)."""
import datetime

import absreplay.api as abs

job = abs.Job("stamped", parallelism=2)
events = job.source("events", abs.json_lines({"id": str, "ts": datetime.datetime}))
events.sink("out", abs.SqlTable("stamped_events", url="${STAMPED_SQL_URL}"), columns={"id": str, "ts": datetime.datetime})
(events.key_by("id", str).aggregate("per_id", n=abs.count(), last=abs.max("ts", datetime.datetime))
    .sink("per_id_out", abs.SqlTable("stamped_per_id", url="${STAMPED_SQL_URL}")))
'''


def land_events(input_dir: Path, batch: int) -> list[tuple[str, datetime.datetime]]:
    """Five events per batch in partition p0, one of them written with an offset; returns (id, instant)."""
    written = [(f"e{(batch * 5 + i) % 7}", f"2026-11-25T1{batch}:0{i}:0{i}.00012{i}" + ("+01:00" if i == 2 else "Z"))
               for i in range(5)]
    path = input_dir / "p0" / f"seg-{batch:04d}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f'{{"id": "{i}", "ts": "{ts}"}}\n' for i, ts in written))
    return [(i, datetime.datetime.fromisoformat(ts)) for i, ts in written]


def test_a_timestamp_sink_in_another_postgresql_database_runs_twice_and_rewinds(
        tmp_path: Path, spark, sqlite_url: str, pg_url: str) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "stamped.py").write_text(STAMPED_JOB)
    assert pg_url.startswith("postgresql://")  # as a user writes it; the sink picks the installed driver
    env = {"ABS_HOME": str(tmp_path / "home"), "ABS_DATABASE_URL": sqlite_url, "ABS_SPARK_MASTER": "local[2]",
           "ABS_JOBS_DIR": str(jobs), "STAMPED_SQL_URL": pg_url}
    input_dir = tmp_path / "home" / "data" / "stamped" / "input"
    sink = make_engine(pg_url)

    def run(*args: str) -> str:
        return cli_ok(None, *args, spark=spark, env=env)

    def sinks() -> tuple[list, dict]:
        with sink.connect() as c:
            events = sorted(tuple(r) for r in c.execute(sa.text("SELECT id, ts FROM stamped_events")))
            per_id = {i: (n, last) for i, n, last in c.execute(sa.text("SELECT id, n, last FROM stamped_per_id"))}
        return events, per_id

    def expected(landed: list[tuple[str, datetime.datetime]]) -> tuple[list, dict]:
        return sorted(landed), {i: (sum(1 for j, _ in landed if j == i), max(t for j, t in landed if j == i))
                                for i, _ in landed}

    landed = land_events(input_dir, 0)
    assert "committed 1,1;" in run("run", "stamped", "--cycles", "1")
    assert sinks() == expected(landed)
    landed += land_events(input_dir, 1)
    assert "committed 2,2;" in run("run", "stamped", "--cycles", "1")  # the second finalize reopens both tables
    assert sinks() == expected(landed)
    out = run("rewind", "stamped", "--to", "1")
    assert "superseded [2]; replays [3]" in out and "committed [3, 3]" in out
    assert sinks() == expected(landed)  # epoch 2 replayed as checkpoint 3: its rows once, not twice
    with sink.connect() as c:
        assert c.execute(sa.text("SELECT checkpoint_id, count(*) FROM stamped_events GROUP BY checkpoint_id "
                                 "ORDER BY checkpoint_id")).all() == [(1, 5), (3, 5)]
        assert c.scalar(sa.text("SELECT data_type FROM information_schema.columns "
                                "WHERE table_name = 'stamped_events' AND column_name = 'ts'")) == \
            "timestamp with time zone"
    sink.dispose()
