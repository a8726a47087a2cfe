"""A source of Parquet segment files: a row is a record, its offset the segment's first offset plus
its row index. Rows with a null field are dead letters at inject; a file without a declared column
is refused at inject, naming it, with nothing registered. The sink equals plain Python; verify is exact."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

from coordinator.dataflow.discovery import get_job
from tests.helpers import JOBS_DIR, cli, cli_ok, make_workspace, one_line_error

pytestmark = [pytest.mark.spark]
JOBS = str(JOBS_DIR)


def land(path: Path, rows: list[dict], schema: pa.Schema | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema or pa.schema([("k", pa.string()), ("v", pa.int64()),
                                                                          ("extra", pa.string())])), tmp)
    os.replace(tmp, path)


@pytest.mark.sink_unchecked("judged here against plain Python")
def test_parquet_segments_are_records_row_by_row(tmp_path, sqlite_url, spark, monkeypatch) -> None:
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    ws = make_workspace(tmp_path, sqlite_url, get_job("parquet_totals"), jobs_dir=JOBS)
    landed: list[dict] = []
    for batch in range(3):
        for part in range(2):
            rows = [{"k": f"k{(batch + i) % 7}", "v": batch * 100 + i, "extra": "x"} for i in range(40 + part)]
            if batch == 1 and part == 0:
                rows[5]["v"] = None  # a dead letter, with its reason
            land(ws.input_dir / f"p{part}" / f"seg-{batch:04d}.parquet", rows)
            landed += [r for r in rows if r["v"] is not None]
        cli_ok(ws, "run", "parquet_totals", spark=spark)
    counts, totals = Counter(r["k"] for r in landed), Counter()
    for r in landed:
        totals[r["k"]] += r["v"]
    with ws.store.engine.connect() as c:
        got = {k: (n, t) for k, n, t in c.execute(text("SELECT k, n, total FROM parquet_totals")).all()}
        dead = c.execute(text("SELECT partition, \"offset\", reason FROM dead_letters")).all()
    assert got == {k: (counts[k], totals[k]) for k in counts}
    assert dead == [("p0", 40 + 5, "field(s) v are null")]  # batch 0 of p0 held 40 rows: offsets 0..39
    assert "verified" in cli_ok(ws, "verify", "parquet_totals", spark=spark)

    # a file without a declared column: inject refuses it by name and registers nothing of the batch
    land(ws.input_dir / "p1" / "seg-0003.parquet", [{"k": "a"}], pa.schema([("k", pa.string())]))
    one_line_error(cli(ws, "inject", "parquet_totals"), "has no column 'v'")
    assert ws.store.job("parquet_totals").last_checkpoint_id == 3
