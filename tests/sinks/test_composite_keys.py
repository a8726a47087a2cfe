"""Upsert sinks keyed by several columns: a keyed operator's whole key (``key_by({"tier": str, "page": str})``)
is the sink's key in every target (SQL table on SQLite and PostgreSQL, Parquet directory, Delta table):
newest value per key, replays written once, reverts to exactly a checkpoint's rows.

The reference is a plain dict keyed by (tier, page)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import absreplay.api as abs
from coordinator.sinks.delta_table import DeltaTable
from coordinator.sinks.parquet_dir import ParquetDirectory
from coordinator.sinks.sql_table import SqlTableTarget

SCHEMA = pa.schema([("tier", pa.string()), ("page", pa.string()), ("clicks", pa.int64())])
KEY = ("tier", "page")
JOB, SINK = "clicks", "per_tier_page"


def rows(model: dict[tuple[str, str], int]) -> pa.Table:
    return pa.table({"tier": [t for t, _ in model], "page": [p for _, p in model], "clicks": list(model.values())},
                    schema=SCHEMA)


def content(target) -> dict[tuple[str, str], int]:
    table = target.read()
    keys = list(zip(table.column("tier").to_pylist(), table.column("page").to_pylist(), strict=True))
    assert len(set(keys)) == len(keys), "one row per (tier, page)"
    return dict(zip(keys, table.column("clicks").to_pylist(), strict=True))


@pytest.fixture(params=["sql-sqlite", "sql-postgresql", "parquet", "delta"])
def target(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param.startswith("sql-"):
        # the catalog's own database, on both backends
        url = request.getfixturevalue("sqlite_url" if request.param == "sql-sqlite" else "pg_url")
        return SqlTableTarget("per_tier_page", SCHEMA, KEY, None, url)
    if request.param == "parquet":
        return ParquetDirectory(tmp_path / "sink", SCHEMA, KEY)
    return DeltaTable(str(tmp_path / "sink"), SCHEMA, KEY)


def test_a_key_of_two_columns_upserts_replays_once_and_reverts(target) -> None:
    target.prepare()
    batches = [
        {("gold", "/a"): 1, ("gold", "/b"): 2, ("free", "/a"): 3},
        {("gold", "/a"): 5, ("free", "/b"): 1},  # one pair updated; a tier already seen, on another page
        {("free", "/a"): 4, ("gold", "/c"): 9},
    ]
    model: dict[tuple[str, str], int] = {}
    at: dict[int, dict] = {}
    for checkpoint_id, batch in enumerate(batches, start=1):
        assert target.commit(JOB, SINK, checkpoint_id, rows(batch)) is True
        model |= batch
        at[checkpoint_id] = dict(model)
        assert content(target) == model
    assert target.commit(JOB, SINK, 2, rows({("gold", "/a"): 99})) is False  # a replay: written already
    assert content(target) == at[3]
    # a rewind's rows are the state at the checkpoint: each row with the checkpoint that last changed it
    state = rows(at[1])
    target.revert(JOB, SINK, 1, state.append_column("updated", pa.array([1] * state.num_rows, pa.int64())), {2, 3})
    assert content(target) == at[1] == {("gold", "/a"): 1, ("gold", "/b"): 2, ("free", "/a"): 3}
    assert target.commit(JOB, SINK, 2, rows({("free", "/a"): 7})) is True
    assert content(target) == at[1] | {("free", "/a"): 7}


def definition(columns=None):
    job = abs.Job("clicks_by_tier", parallelism=1)
    (job.source("clicks", abs.json_lines({"tier": str, "page": str}))
        .key_by({"tier": str, "page": str})
        .aggregate("per_tier_page", clicks=abs.count())
        .sink("to_sql", abs.SqlTable("per_tier_page"), columns=columns))
    return job.definition()


def test_a_keyed_operator_with_two_key_columns_gets_an_upsert_sink_on_both() -> None:
    (sink,) = [s for s in definition().sinks if s.name == "to_sql"]
    assert sink.key == ("tier", "page") and sink.column_names[:2] == ("tier", "page")


def test_a_sink_whose_columns_do_not_start_with_the_whole_key_is_refused() -> None:
    with pytest.raises(ValueError, match="columns must start with the key 'tier', 'page'"):
        definition(columns=("page", "tier", "clicks"))


def test_the_newest_row_of_each_key_of_two_columns_is_kept_not_one_per_first_column() -> None:
    """What a restore from a chain keeps, and what ``absreplay state``/``diff`` show (``newest_per_key``)."""
    from coordinator.checkpoints.state_files import newest_per_key

    chain = pa.table({"tier": ["gold", "gold", "gold", "free", "free"], "page": ["/a", "/b", "/a", "/a", "/a"],
                      "clicks": [1, 2, 5, 3, 4], "updated": [1, 1, 2, 1, 3]})
    newest = newest_per_key(chain, ("tier", "page")).to_pylist()
    assert sorted((r["tier"], r["page"], r["clicks"], r["updated"]) for r in newest) == [
        ("free", "/a", 4, 3), ("gold", "/a", 5, 2), ("gold", "/b", 2, 1)]
