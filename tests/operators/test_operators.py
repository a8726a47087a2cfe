"""The built-in operators end to end, on a job declared with the public API (tests/jobs/operators_demo.py): every
aggregate (count, sum, min, max, mean, a user-defined combiner), a keyed process function and a
sliding event-time window, into a SQL table and a Parquet directory. After a few epochs each sink
equals a plain-Python computation over the landed records, and `verify` is exact."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from coordinator.dataflow.discovery import get_job
from tests.helpers import JOBS_DIR, cli_ok, make_workspace

pytestmark = [pytest.mark.spark]
JOBS = str(JOBS_DIR)
MINUTE = 60_000


def land(input_dir: Path, batch: int) -> list[dict]:
    rows = [{"k": f"k{(batch * 7 + i) % 5}", "v": (batch * 13 + i * 7) % 50, "t": batch * MINUTE + i * 1_000}
            for i in range(30)]
    for part in (0, 1):
        path = input_dir / f"p{part}" / f"seg-{batch:04d}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[part::2]))
    return rows


@pytest.mark.sink_unchecked("the sinks are judged in the test itself, against plain Python")
def test_every_operator_against_plain_python(tmp_path, sqlite_url, spark, monkeypatch) -> None:
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    monkeypatch.setenv("OPERATORS_OUT", str(tmp_path / "out"))
    job = get_job("operators")
    ws = make_workspace(tmp_path, sqlite_url, job, jobs_dir=JOBS)
    seen: list[dict] = []
    epochs: list[list[dict]] = []
    for batch in range(4):
        rows = land(ws.input_dir, batch)
        seen += rows
        epochs.append(rows)
        cli_ok(ws, "run", "operators", spark=spark)
    by_key = defaultdict(list)
    for r in seen:
        by_key[r["k"]].append(r["v"])
    bits = {}
    for k, vs in by_key.items():
        b = 0
        for v in vs:
            b |= v
        bits[k] = b
    expected = {k: (len(vs), sum(vs), min(vs), max(vs), sum(vs) / len(vs), bits[k]) for k, vs in by_key.items()}
    got = {r["k"]: (r["n"], r["total"], r["lo"], r["hi"], r["avg"], r["bits"])
           for r in job.sinks[0].target(sqlite_url).read().to_pylist()}
    assert got == expected

    # process: per epoch, in event-time order, the newest value and the rises so far
    trend: dict[str, tuple[int, int]] = {}
    for rows in epochs:
        for r in sorted(rows, key=lambda r: (r["k"], r["t"])):
            last, rises = trend.get(r["k"], (r["v"], 0))
            trend[r["k"]] = (r["v"], rises + (r["v"] > last))
    got = {r["k"]: (r["last"], r["rises"]) for r in job.sinks[1].target(sqlite_url).read().to_pylist()}
    assert got == trend

    # sliding windows of two minutes every minute: the watermark after epoch 4 is the newest event time
    mark = max(r["t"] for r in seen)
    windows: dict[tuple[str, int], int] = defaultdict(int)
    for r in seen:
        for start in (r["t"] // MINUTE * MINUTE - MINUTE, r["t"] // MINUTE * MINUTE):
            windows[(r["k"], start)] += 1
    fired = {w: n for w, n in windows.items() if w[1] + 2 * MINUTE <= mark}
    got = {(r["k"], r["window_start"]): r["n"] for r in job.sinks[2].target(sqlite_url).read().to_pylist()}
    assert got == fired and len(got) > 5

    # an aggregate keyed by two columns, upserted on both
    parity: dict[tuple[str, bool], tuple[int, int]] = {}
    for r in seen:
        n, total = parity.get((r["k"], r["v"] % 2 == 0), (0, 0))
        parity[(r["k"], r["v"] % 2 == 0)] = (n + 1, total + r["v"])
    (sink,) = [s for s in job.sinks if s.name == "parity_out"]
    assert sink.key == ("k", "even")
    rows = sink.target(sqlite_url).read().to_pylist()
    assert {(r["k"], r["even"]): (r["n"], r["total"]) for r in rows} == parity and len(rows) == len(parity)

    assert "verified" in cli_ok(ws, "verify", "operators", spark=spark)
