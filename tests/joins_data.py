"""Input for the tests' clicks_to_buys job (tests/jobs), and its sink recomputed in plain Python.

Batches land clicks and buys (JSON lines) in two partitions each. Event time moves forward a minute a
batch; a user's clicks are seconds apart and about half of them have a buy near them (some just outside
the interval), so pairs form within an epoch and across two, and some clicks match nothing. About one
record in eight arrives a batch late: behind the watermark, it is a dead letter, unless it is still at or
past it.

The reference needs nothing of the job's code. It reads the records epoch by epoch (along the checkpoints'
recorded epoch starts: the watermark moves once per epoch), keeps each side's buffered records as a list
and joins a record at a time, as the job's documentation says: a record below the watermark before its
epoch is late; a click at ta and a buy at tb of the same user match when tb - 10 s <= ta <= tb + 20 s,
emitted once, in the epoch of the later one; after the epoch the watermark is min(newest click, newest
buy) - 5 s, a click leaves once ta + 10 s is below it (with nulls, if it never matched), a buy once
tb + 20 s is.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select, text

from coordinator.catalog.models import DeadLetter, SinkWatermark
from tests.segment_files import land as land_segment
from tests.segment_files import partition_lines

LOWER, UPPER, DELAY = 10_000, 20_000, 5_000  # as tests/jobs/clicks_to_buys.py declares them
T0 = 1_767_225_600_000  # epoch ms
USERS = 6
JOB, JOIN, TABLE = "clicks_to_buys", "near", "clicks_to_buys"
SOURCES = ("clicks", "buys")


def _native(batch: int) -> dict[str, list[tuple[dict, bool]]]:
    """Batch ``batch``'s own records per source, each with whether it arrives a batch late."""
    rng = random.Random(4099 + batch)
    base = T0 + batch * 60_000
    out: dict[str, list[tuple[dict, bool]]] = {"clicks": [], "buys": []}
    for user in range(USERS):
        ts = base + rng.randrange(0, 6_000)
        i = 0
        while ts < base + 60_000:
            click = {"id": f"c{batch}-{user}-{i}", "user": f"u{user}", "ts": ts, "page": rng.choice("abcd")}
            out["clicks"].append((click, rng.random() < 0.12))
            if rng.random() < 0.5:  # a buy near it: inside [ta - 20 s, ta + 10 s], or just outside
                tb = min(ts + rng.randrange(-24_000, 14_000), base + 59_999)
                buy = {"id": f"b{batch}-{user}-{i}", "user": f"u{user}", "ts": max(tb, base),
                       "amount": rng.randrange(1, 99)}
                out["buys"].append((buy, rng.random() < 0.12))
            ts += rng.choice((3_000, 7_000, 12_000, 19_000))
            i += 1
    return out


def land(input_dir: Path, batch: int) -> int:
    """Batch ``batch``: its own records on time, and the previous batch's late ones; returns how many."""
    landed = 0
    now, before = _native(batch), _native(batch - 1) if batch else {"clicks": [], "buys": []}
    for name in SOURCES:
        rows = [r for r, late in now[name] if not late] + [r for r, late in before[name] if late]
        for part in range(2):
            land_segment(input_dir / name / f"p{part}" / f"seg-{batch:04d}", [json.dumps(r) for r in rows[part::2]])
        landed += len(rows)
    return landed


def records(input_dir: Path, source: str, start: dict[str, int], end: dict[str, int]) -> list[tuple[str, int, dict]]:
    """(partition, offset, record) of one source between two cuts (an epoch's), partitions in name order."""
    out = []
    for partition, stop in sorted(end.items()):
        if not partition.startswith(source + "/"):
            continue
        lines = partition_lines(input_dir / partition)
        first = start.get(partition, 0)
        out += [(partition, first + i, json.loads(line)) for i, line in enumerate(lines[first:stop])]
    return out


def _row(click: dict, buy: dict | None) -> tuple:
    return (click["user"], click["id"], click["ts"], click["page"], *(
        (buy["id"], buy["ts"], buy["amount"]) if buy else (None, None, None)))


@dataclass
class Reference:
    """The joined rows and the late records, epoch by epoch, a record at a time."""

    #: buffered records: [partition, offset, record, matched]
    clicks: list[list] = field(default_factory=list)
    buys: list[list] = field(default_factory=list)
    joined: list[tuple] = field(default_factory=list)
    #: (source, id) of each late record
    late: list[tuple[str, str]] = field(default_factory=list)
    newest: dict[str, int] = field(default_factory=dict)
    mark: int | None = None
    #: rows with nulls; pairs whose two records came in different epochs
    unmatched: int = 0
    across: int = 0

    def epoch(self, clicks: list[tuple[str, int, dict]], buys: list[tuple[str, int, dict]]) -> None:
        before = self.mark
        fresh: dict[str, list[list]] = {"clicks": [], "buys": []}
        for name, arrived in (("clicks", clicks), ("buys", buys)):
            for partition, offset, r in arrived:
                self.newest[name] = max(self.newest.get(name, r["ts"]), r["ts"])
                if before is not None and r["ts"] < before:
                    self.late.append((name, r["id"]))
                else:
                    fresh[name].append([partition, offset, r, False])
        for c in fresh["clicks"]:
            for b in self.buys + fresh["buys"]:
                if self._match(c, b):
                    self.across += b in self.buys
        for c in self.clicks:
            for b in fresh["buys"]:
                if self._match(c, b):
                    self.across += 1
        self.clicks += fresh["clicks"]
        self.buys += fresh["buys"]
        if len(self.newest) == 2:
            mark = min(self.newest.values()) - DELAY
            self.mark = mark if before is None else max(before, mark)
            for c in [c for c in self.clicks if c[2]["ts"] + LOWER < self.mark]:
                self.clicks.remove(c)
                if not c[3]:
                    self.joined.append(_row(c[2], None))
                    self.unmatched += 1
            self.buys = [b for b in self.buys if b[2]["ts"] + UPPER >= self.mark]

    def _match(self, c: list, b: list) -> bool:
        click, buy = c[2], b[2]
        if click["user"] != buy["user"] or not buy["ts"] - LOWER <= click["ts"] <= buy["ts"] + UPPER:
            return False
        self.joined.append(_row(click, buy))
        c[3] = True
        return True

    @property
    def buffered(self) -> list[tuple[str, str, int]]:
        """(side, partition, offset) of every buffered record, as the join's state names them."""
        return [("L", p, o) for p, o, _, _ in self.clicks] + [("R", p, o) for p, o, _, _ in self.buys]


def reference(input_dir: Path, cuts: list[dict[str, int]]) -> Reference:
    ref = Reference()
    start: dict[str, int] = {}
    for cut in cuts:
        ref.epoch(records(input_dir, "clicks", start, cut), records(input_dir, "buys", start, cut))
        start = cut
    return ref


def committed(store) -> list[tuple]:
    with store.engine.connect() as c:
        return [tuple(r) for r in c.execute(text(
            f'SELECT "user", id, ts, page, id_right, ts_right, amount FROM {TABLE}'))]


def check(ws) -> dict[str, tuple[int, int]]:
    """sink -> (lost, duplicated) rows against the reference at each sink's high-water marks: the joined
    rows of ``to_sql``, and the late records among the join's dead letters (``near_late``)."""
    from tests.sink_check import epoch_cuts

    out = {}
    for sink in ("to_sql", f"{JOIN}_late"):
        with ws.store.sessions() as s:
            at = s.scalar(select(SinkWatermark.checkpoint_id).where(
                SinkWatermark.job == JOB, SinkWatermark.sink == sink).limit(1))
            dead = [(p.split("/")[0], json.loads(payload)["id"]) for p, payload in s.execute(
                select(DeadLetter.partition, DeadLetter.payload).where(
                    DeadLetter.job == JOB, DeadLetter.segment == JOIN)).all()]
        ref = reference(ws.input_dir, epoch_cuts(ws.store, JOB, at)) if at is not None else Reference()
        expected, got = ((Counter(ref.joined), Counter(committed(ws.store) if at is not None else []))
                         if sink == "to_sql" else (Counter(ref.late), Counter(dead)))
        out[sink] = (sum((expected - got).values()), sum((got - expected).values()))
    return out
