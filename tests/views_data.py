"""Input for the tests' views_by_country job (tests/jobs), and the check of its sinks in plain Python.

Batches land views (JSON lines) and users (CSV) in two partitions each. Event
time moves forward about two minutes a batch, with jitter; every batch also
has a few views far behind the watermark (they become dead letters) and views
of users whose row lands only in a later batch (they wait in the join). Each
user has one country for good, so what a view joins with never depends on where
epochs end.

The check needs nothing of the job's code: for every window a sink holds, its
count and time on page equal those of the views in it that reached the window
(their user known by the sink's cut) minus those the catalog holds as dead
letters; no window is there twice; and a window the watermark of the committed
checkpoint has passed is there (else it was lost).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
from sqlalchemy import select, text

from coordinator.catalog.db import make_engine

from coordinator.catalog.models import DeadLetter, SinkWatermark, TaskAck
from tests.segment_files import land as land_segment
from tests.segment_files import partition_lines

MINUTE = 60_000
DELAY = 30_000
COUNTRIES = ("fr", "de", "jp", "br")
PAGES = ("/", "/cart", "/help")


def country_of(user: int) -> str:
    return COUNTRIES[user % len(COUNTRIES)]


def land(input_dir: Path, batch: int, views: int = 120, users: int = 40) -> None:
    """Batch ``batch``: users 0..(batch+1)*users-1 are known once it lands; its views come from users
    up to 25% beyond that (they wait for a later batch's users)."""
    rng = random.Random(batch)
    known = (batch + 1) * users
    for part in range(2):
        rows = [f"{u},{country_of(u)}" for u in range(batch * users, known) if u % 2 == part]
        if batch % 3 == 1:  # a user's row again, same country: the latest row wins, nothing changes
            rows.append(f"{part},{country_of(part)}")
        land_segment(input_dir / "users" / f"p{part}" / f"seg-{batch:04d}", rows)
        lines = []
        base = batch * 2 * MINUTE
        for _ in range(views // 2):
            user = rng.randrange(0, int(known * 1.25))
            ts = base + rng.randrange(-40_000, 2 * MINUTE)
            if rng.random() < 0.05:
                ts = base - 5 * MINUTE  # far behind the watermark: late
            page = rng.choice(PAGES) if rng.random() > 0.02 else ""
            lines.append(json.dumps({"user": user, "page": page, "ts": max(ts, 0), "ms": rng.randrange(1, 900)}))
        land_segment(input_dir / "views" / f"p{part}" / f"seg-{batch:04d}", lines)


def _read(input_dir: Path, source: str, cut: dict[str, int]) -> list[str]:
    out = []
    for partition, end in sorted(cut.items()):
        if not partition.startswith(source + "/"):
            continue
        lines = partition_lines(input_dir / partition)
        out += lines[:end]
    return out


def window_of(ts: int) -> int:
    return ts // MINUTE * MINUTE


def reference(input_dir: Path, cut: dict[str, int]) -> dict[tuple[str, str, int], tuple[int, int]]:
    """(country, page, window start) -> (views, time on page) of every view before ``cut`` that
    reaches the window: a real page, and its user's row before the cut too."""
    countries = {int(u): c for u, c in (line.split(",") for line in _read(input_dir, "users", cut))}
    totals: Counter = Counter()
    ms: Counter = Counter()
    for line in _read(input_dir, "views", cut):
        v = json.loads(line)
        if v["page"] == "" or v["user"] not in countries:
            continue
        w = (countries[v["user"]], v["page"], window_of(v["ts"]))
        totals[w] += 1
        ms[w] += v["ms"]
    return {w: (n, ms[w]) for w, n in totals.items()}


def sink_rows(table: pa.Table) -> list[tuple[str, str, int, int, int]]:
    return [(r["country"], r["page"], r["window_start"], r["views"], r["ms"]) for r in table.to_pylist()]


def check(store, job: str, input_dir: Path, sinks: dict[str, pa.Table]) -> dict[str, tuple[int, int]]:
    """sink -> (lost, duplicated) windows, against the reference at the sink's high-water marks."""
    with store.sessions() as s:
        dead = s.execute(select(DeadLetter.payload, DeadLetter.partition, DeadLetter.offset).where(
            DeadLetter.job == job, DeadLetter.segment == "per_minute")).all()
    assert len({(p, o) for _, p, o in dead}) == len(dead), "a late view is a dead letter twice"
    late: Counter = Counter()
    late_ms: Counter = Counter()
    for payload, _, _ in dead:
        v = json.loads(payload)
        w = (v["country"], v["page"], window_of(v["ts"]))
        late[w] += 1
        late_ms[w] += v["ms"]
    out = {}
    for name, table in sinks.items():
        with store.sessions() as s:
            marks = dict(s.execute(select(SinkWatermark.partition, SinkWatermark.offset).where(
                SinkWatermark.job == job, SinkWatermark.sink == name)).all())
            at = s.scalar(select(SinkWatermark.checkpoint_id).where(
                SinkWatermark.job == job, SinkWatermark.sink == name).limit(1))
            mark = s.scalar(select(TaskAck.watermark).where(
                TaskAck.job == job, TaskAck.checkpoint_id == at, TaskAck.operator == "per_minute").limit(1))
        expected = reference(input_dir, marks)
        rows = sink_rows(table)
        seen = Counter((c, p, w) for c, p, w, _, _ in rows)
        duplicated = sum(n - 1 for n in seen.values() if n > 1)
        wrong = sum(1 for c, p, w, n, ms in rows
                    if (n + late[(c, p, w)], ms + late_ms[(c, p, w)]) != expected.get((c, p, w), (None, None)))
        missing = sum(1 for (c, p, w), (n, _) in expected.items()
                      if mark is not None and w + MINUTE <= mark and (c, p, w) not in seen and n > late[(c, p, w)])
        out[name] = (wrong + missing, duplicated)
    return out


def postgres_rows(url: str) -> pa.Table:
    engine = make_engine(url)
    with engine.connect() as c:
        rows = c.execute(text("SELECT country, page, window_start, views, ms FROM views_per_minute")).mappings().all()
    engine.dispose()
    return pa.Table.from_pylist([dict(r) for r in rows])
