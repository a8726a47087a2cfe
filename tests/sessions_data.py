"""Input for the tests' click_sessions job (tests/jobs), and its sink recomputed in plain Python.

Batches land clicks (JSON lines) in two partitions. Event time moves forward a minute a batch; a
user's clicks are a few seconds to half a minute apart, so sessions (gap 20 s) split and grow across
batches; some clicks come behind the watermark: within an open session or between two (they extend or
bridge them), or for a session emitted already, or so far behind that a session of their own would be
emitted already (dead letters).

The reference needs nothing of the job's code. It reads the records epoch by epoch (along the
checkpoints' recorded epoch starts: the watermark moves once per epoch) and keeps each user's open
sessions as a list, a record at a time: a click's span [ts, ts + gap) merged with every open session it
overlaps. A click is late when, before its epoch, the watermark was set and its own span's end plus
the allowed lateness was at or below it, or it is before the end of any session of its user emitted
ever. After each epoch the watermark moves to the newest click minus the delay and every open session
whose end plus the allowed lateness it reached is emitted.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select, text

from coordinator.catalog.models import DeadLetter, SinkWatermark
from tests.segment_files import land as land_segment
from tests.segment_files import partition_lines

GAP, DELAY, LATENESS = 20_000, 15_000, 5_000  # as tests/jobs/click_sessions.py declares them
T0 = 1_767_225_600_000  # epoch ms
USERS = 8
JOB, WINDOW, TABLE = "click_sessions", "sessions", "click_sessions"


def land(input_dir: Path, batch: int) -> int:
    """Batch ``batch``'s clicks over two partitions (a segment per user in each); returns how many."""
    rng = random.Random(7919 + batch)
    base = T0 + batch * 60_000
    landed = 0
    for user in range(USERS):
        times = []
        ts = base + rng.randrange(0, 15_000)
        while ts < base + 60_000:
            times.append(ts)
            ts += rng.choice((2_000, 5_000, 9_000, 14_000, 19_999, 20_000, 26_000, 33_000))
        for _ in range(2 if batch else 0):  # behind the watermark: in a session, between two, or late
            times.append(base - rng.randrange(0, 50_000))
        if batch % 2:
            times.append(base - 4 * 60_000)  # far behind: a session of its own is emitted already
        rows = [{"id": f"b{batch}-u{user}-{i}", "user": f"u{user}", "ts": t, "ms": rng.randrange(1, 900)}
                for i, t in enumerate(times)]
        rng.shuffle(rows)
        for part in range(2):
            land_segment(input_dir / f"p{part}" / f"seg-{batch:04d}-u{user}", [json.dumps(r) for r in rows[part::2]])
        landed += len(rows)
    return landed


def records(input_dir: Path, start: dict[str, int], end: dict[str, int]) -> list[dict]:
    """The records between two cuts (an epoch's), partitions in name order, segments in name order."""
    out = []
    for partition, stop in sorted(end.items()):
        lines = partition_lines(input_dir / partition)
        out += [json.loads(line) for line in lines[start.get(partition, 0):stop]]
    return out


@dataclass
class Reference:
    """The sessions emitted and the late clicks, epoch by epoch, a click at a time."""

    #: user -> open sessions, each [start, end, clicks, last, ms, the epoch that last changed it]
    open: dict[str, list[list[int]]] = field(default_factory=lambda: defaultdict(list))
    #: user -> the end of every session it emitted, ever
    ends: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    emitted: list[tuple[str, int, int, int, int, int]] = field(default_factory=list)
    late: list[str] = field(default_factory=list)
    mark: int | None = None
    epochs: int = 0
    #: clicks that merged two sessions or more; clicks that joined a session of an earlier epoch
    bridges: int = 0
    extended: int = 0

    def epoch(self, clicks: list[dict]) -> None:
        before, n = self.mark, self.epochs
        for c in clicks:
            user, ts = c["user"], c["ts"]
            if before is not None and (ts + GAP + LATENESS <= before or any(ts < e for e in self.ends[user])):
                self.late.append(c["id"])
                continue
            span = [ts, ts + GAP, 1, ts, c["ms"], n]
            touching = [s for s in self.open[user] if s[0] < span[1] and span[0] < s[1]]
            self.bridges += len(touching) >= 2
            self.extended += any(s[5] < n for s in touching)
            for s in touching:
                self.open[user].remove(s)
                span = [min(s[0], span[0]), max(s[1], span[1]), s[2] + span[2], max(s[3], span[3]),
                        s[4] + span[4], n]
            self.open[user].append(span)
        if clicks:
            newest = max(c["ts"] for c in clicks) - DELAY
            self.mark = newest if before is None else max(before, newest)
        for user, sessions in self.open.items():
            for s in [s for s in sessions if self.mark is not None and s[1] + LATENESS <= self.mark]:
                sessions.remove(s)
                self.ends[user].append(s[1])
                self.emitted.append((user, *s[:5]))
        self.epochs += 1


def reference(input_dir: Path, cuts: list[dict[str, int]]) -> Reference:
    ref = Reference()
    start: dict[str, int] = {}
    for cut in cuts:
        ref.epoch(records(input_dir, start, cut))
        start = cut
    return ref


def committed(store) -> list[tuple[str, int, int, int, int, int]]:
    with store.engine.connect() as c:
        return [tuple(r) for r in c.execute(text(
            f'SELECT "user", window_start, window_end, clicks, last, ms FROM {TABLE}'))]


def check(ws) -> dict[str, tuple[int, int]]:
    """sink -> (lost, duplicated) rows against the reference at each sink's high-water marks: the sessions
    of ``to_sql``, and the late clicks among the window's dead letters (``sessions_late``)."""
    from tests.sink_check import epoch_cuts

    out = {}
    for sink in ("to_sql", f"{WINDOW}_late"):
        with ws.store.sessions() as s:
            at = s.scalar(select(SinkWatermark.checkpoint_id).where(
                SinkWatermark.job == JOB, SinkWatermark.sink == sink).limit(1))
            dead = [json.loads(p)["id"] for p in s.execute(select(DeadLetter.payload).where(
                DeadLetter.job == JOB, DeadLetter.segment == WINDOW)).scalars()]
        ref = reference(ws.input_dir, epoch_cuts(ws.store, JOB, at)) if at is not None else Reference()
        expected, got = ((Counter(ref.emitted), Counter(committed(ws.store) if at is not None else []))
                         if sink == "to_sql" else (Counter(ref.late), Counter(dead)))
        out[sink] = (sum((expected - got).values()), sum((got - expected).values()))
    return out
