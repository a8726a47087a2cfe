"""Input for the tests' refired_clicks job (tests/jobs), and its sinks recomputed in plain Python.

Batches land clicks (JSON lines) in two partitions. Event time moves forward a minute a batch; each
user clicks a few times in the batch's minute, and from batch 1 on some clicks come behind the
watermark: within the allowed lateness (they change windows emitted already: a re-fire) or beyond it
(dead letters of the window).

The reference needs nothing of the job's code. It reads the records epoch by epoch (along the
checkpoints' recorded epoch starts: the watermark moves once per epoch): a click is late when, before
its epoch, the watermark was set and its window's end plus the allowed lateness was at or below it; the
others count in their window. After each epoch the watermark moves to the newest click minus the delay;
every window whose end it reached is in the sink with its counts so far, and a window whose end plus the
lateness it reached can change no more.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tests.sessions_data import records
from tests.segment_files import land as land_segment

WINDOW, DELAY, LATENESS = 60_000, 10_000, 90_000  # as tests/jobs/refired_clicks.py declares them
T0 = 1_767_225_600_000  # epoch ms, on a minute
USERS = 6
JOB, OPERATOR = "refired_clicks", "per_minute"


def land(input_dir: Path, batch: int) -> int:
    """Batch ``batch``'s clicks over two partitions (a segment per user in each); returns how many."""
    rng = random.Random(104_729 + batch)
    base = T0 + batch * WINDOW
    landed = 0
    for user in range(USERS):
        times = sorted(base + rng.randrange(0, WINDOW) for _ in range(rng.randrange(2, 6)))
        if batch:  # behind the watermark: within the lateness (a re-fire) ...
            times += [base - rng.randrange(15_000, 80_000) for _ in range(2)]
        if batch >= 2 and user % 2:  # ... and beyond it: a dead letter
            times.append(base - rng.randrange(170_000, 230_000))
        rows = [{"id": f"b{batch}-u{user}-{i}", "user": f"u{user}", "ts": t} for i, t in enumerate(times)]
        rng.shuffle(rows)
        for part in range(2):
            land_segment(input_dir / f"p{part}" / f"seg-{batch:04d}-u{user}", [json.dumps(r) for r in rows[part::2]])
        landed += len(rows)
    return landed


def reference(input_dir: Path, cuts: list[dict[str, int]]) -> tuple[dict[tuple[str, int], tuple[int, int]], set[str]]:
    """((user, window_start) -> (clicks, last) as the sinks hold it after the last cut, the late clicks' ids)."""
    counts: dict[tuple[str, int], tuple[int, int]] = {}
    late: set[str] = set()
    mark = None
    start: dict[str, int] = {}
    for cut in cuts:
        clicks = records(input_dir, start, cut)
        for c in clicks:
            w = c["ts"] - c["ts"] % WINDOW
            if mark is not None and w + WINDOW + LATENESS <= mark:
                late.add(c["id"])
                continue
            n, last = counts.get((c["user"], w), (0, c["ts"]))
            counts[c["user"], w] = (n + 1, max(last, c["ts"]))
        if clicks:
            newest = max(c["ts"] for c in clicks) - DELAY
            mark = newest if mark is None else max(mark, newest)
        start = cut
    emitted = {k: v for k, v in counts.items() if mark is not None and k[1] + WINDOW <= mark}
    return emitted, late


def sink_rows(table) -> dict[tuple[str, int], tuple[int, int]]:
    rows = table.to_pylist()
    assert all(r["window_end"] == r["window_start"] + WINDOW for r in rows)
    return {(r["user"], r["window_start"]): (r["clicks"], r["last"]) for r in rows}
