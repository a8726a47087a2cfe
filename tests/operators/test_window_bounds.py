"""A tumbling or sliding window's bounds, exactly: a window is [start, end), a record at its end time is in
the next one; the watermark (the newest event time so far minus the delay, moved once per epoch) closes a
window when it reaches its end, equal included; a record whose every window is closed is a dead letter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text

import absreplay.api as abs
from tests.helpers import make_workspace
from tests.segment_files import land

pytestmark = [pytest.mark.spark]


def windows_job() -> abs.Job:
    job = abs.Job("window_bounds", parallelism=1)
    keyed = job.source("clicks", abs.json_lines({"user": str, "t": int}, time="t")).key_by("user", str)
    keyed.window("tumbling", abs.Tumbling(ms=10), time="t", delay_ms=5, n=abs.count()).sink(
        "tumbling_out", abs.SqlTable("bounds_tumbling"))
    keyed.window("sliding", abs.Sliding(size_ms=10, slide_ms=5), time="t", delay_ms=0, n=abs.count()).sink(
        "sliding_out", abs.SqlTable("bounds_sliding"))
    return job


@pytest.mark.sink_unchecked("judged here: every window and every late record, by hand")
def test_a_watermark_equal_to_a_windows_end_closes_it(tmp_path: Path, sqlite_url: str, spark) -> None:
    ws = make_workspace(tmp_path, sqlite_url, windows_job().definition())

    def epoch(batch: int, *times: int) -> None:
        land(ws.input_dir / "p0" / f"seg-{batch:04d}", [json.dumps({"user": "u", "t": t}) for t in times])
        ws.epoch(spark)

    def emitted(table: str) -> list[tuple[int, int, int]]:
        with ws.store.engine.connect() as c:
            return sorted(c.execute(text(f"SELECT window_start, window_end, n FROM {table}")).all())

    def late(operator: str) -> list[int]:
        with ws.store.engine.connect() as c:
            return sorted(json.loads(p)["t"] for p in c.execute(text(
                "SELECT payload FROM dead_letters WHERE segment = :op"), {"op": operator}).scalars())

    # tumbling, delay 5: the watermark is 15 - 5 = 10, equal to [0, 10)'s end: it closes (3 and 7)
    # sliding, no delay: the watermark 15 closes [-5, 5), [0, 10) and [5, 15) (7; 15 is in [10, 20), [15, 25))
    epoch(1, 3, 7, 15)
    assert emitted("bounds_tumbling") == [(0, 10, 2)]
    assert emitted("bounds_sliding") == [(-5, 5, 1), (0, 10, 2), (5, 15, 1)]
    # t = 9 is in closed windows only: late for both. t = 10 and t = 14 take the windows still open
    # ([10, 20); sliding: not [5, 15)). The watermarks stay (max(10, 14 - 5), max(15, 14))
    epoch(2, 10, 9, 14)
    assert late("tumbling") == late("sliding") == [9]
    assert emitted("bounds_tumbling") == [(0, 10, 2)]
    assert emitted("bounds_sliding") == [(-5, 5, 1), (0, 10, 2), (5, 15, 1)]
    # the newest event time 25: the watermarks 20 and 25 close [10, 20) and, sliding, [15, 25) at their ends
    epoch(3, 25)
    assert emitted("bounds_tumbling") == [(0, 10, 2), (10, 20, 3)]
    assert emitted("bounds_sliding") == [(-5, 5, 1), (0, 10, 2), (5, 15, 1), (10, 20, 3), (15, 25, 1)]
