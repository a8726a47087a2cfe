"""Input for tests/jobs/idle_users.py and its reference in plain Python (never the job's code): the state
TTL applied epoch by epoch along the checkpoints' recorded epoch starts."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.sources import source
from tests.segment_files import land as land_segment
from tests.segment_files import partition_lines

USERS = 40
#: users with clicks in one batch
ACTIVE = 14
PARTITIONS = 2
#: the job's TTLs, in epochs and in event-time ms
PER_USER_TTL = 2
STREAK_TTL = 1
RECENT_TTL_MS = 2500
VISITS_TTL_MS = 1500
#: the operators, in the order ``Reference.dropped`` counts them
OPERATORS = ("per_user", "streak", "recent", "visits")


def land(input_dir: Path, batch: int, clicks: int = 60) -> None:
    """Batch ``batch``'s clicks by ``ACTIVE`` of the users, one segment per partition; event times about a
    second apart per batch, out of order within a batch and overlapping the batch before."""
    rng = random.Random(6151 * batch + 11)
    active = rng.sample(range(USERS), ACTIVE)
    rows: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for user in active + [rng.choice(active) for _ in range(clicks - ACTIVE)]:
        rows[user % PARTITIONS].append(json.dumps({"user": f"u{user}", "n": rng.randrange(1, 100),
                                                   "ts": 100_000 + batch * 1000 + rng.randrange(-400, 900)}))
    for p, lines in rows.items():
        land_segment(input_dir / f"p{p}" / f"seg-{batch:05d}.json", lines)


def clicks_between(input_dir: Path, start: dict[str, int], end: dict[str, int]) -> list[dict]:
    """The clicks between two cuts (a partition's offset is its line number across its segments)."""
    found = []
    for partition, stop in end.items():
        found += [json.loads(line) for line in partition_lines(input_dir / partition)[start.get(partition, 0):stop]]
    return found


@dataclass
class Reference:
    #: user -> (clicks, total)
    per_user: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: user -> (epochs, peak)
    streak: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: user -> clicks, of the event-time TTLs
    recent: dict[str, int] = field(default_factory=dict)
    visits: dict[str, int] = field(default_factory=dict)
    #: per epoch, in order: keys dropped by each of ``OPERATORS``
    dropped: list[tuple[int, ...]] = field(default_factory=list)


def reference(input_dir: Path, cuts: list[dict[str, int]]) -> Reference:
    """Every operator after the epochs ending at ``cuts`` (in order). A key no epoch wrote for its TTL in
    epochs is dropped at the end of the epoch that makes it so; in event time, a key the epoch did not
    write whose newest click is its TTL or more behind the watermark before the epoch (the newest click so
    far) is dropped at the end of the epoch."""
    ref = Reference()
    per_user: dict[str, list[int]] = {}  # user -> [clicks, total, epoch of the last write]
    streaks: dict[str, list[int]] = {}  # user -> [epochs, peak, epoch of the last write]
    timed: dict[str, dict[str, list[int]]] = {"recent": {}, "visits": {}}  # user -> [clicks, newest ts]
    ttl_ms = {"recent": RECENT_TTL_MS, "visits": VISITS_TTL_MS}
    mark = None
    start: dict[str, int] = {}
    for depth, cut in enumerate(cuts, 1):
        peaks: dict[str, int] = {}
        clicks = clicks_between(input_dir, start, cut)
        expired = []
        for name, rows in timed.items():
            for click in clicks:
                row = rows.get(click["user"], [0, click["ts"]])
                rows[click["user"]] = [row[0] + 1, max(row[1], click["ts"])]
            written = {c["user"] for c in clicks}
            out = [] if mark is None else [u for u, (_, ts) in rows.items()
                                           if u not in written and ts + ttl_ms[name] <= mark]
            for u in out:
                del rows[u]
            expired.append(len(out))
        if clicks:
            mark = max([c["ts"] for c in clicks] + ([mark] if mark is not None else []))
        for click in clicks:
            row = per_user.setdefault(click["user"], [0, 0, depth])
            row[0], row[1], row[2] = row[0] + 1, row[1] + click["n"], depth
            peaks[click["user"]] = max(peaks.get(click["user"], 0), click["n"])
        for user, peak in peaks.items():
            epochs = streaks[user][0] if user in streaks else 0
            streaks[user] = [epochs + 1, peak, depth]
        gone = [u for u, row in per_user.items() if depth - row[2] >= PER_USER_TTL]
        ended = [u for u, row in streaks.items() if depth - row[2] >= STREAK_TTL]
        for u in gone:
            del per_user[u]
        for u in ended:
            del streaks[u]
        ref.dropped.append((len(gone), len(ended), *expired))
        start = cut
    ref.per_user = {u: (c, t) for u, (c, t, _) in per_user.items()}
    ref.streak = {u: (e, p) for u, (e, p, _) in streaks.items()}
    ref.recent = {u: c for u, (c, _) in timed["recent"].items()}
    ref.visits = {u: c for u, (c, _) in timed["visits"].items()}
    return ref


def sink_rows(sink_name: str, table) -> dict:
    if sink_name in ("recent_sql", "visits_sql"):
        return {r["user"]: r["clicks"] for r in table.to_pylist()}
    if sink_name == "streak_sql":
        return {r["user"]: (r["epochs"], r["peak"]) for r in table.to_pylist()}
    return {r["user"]: (r["clicks"], r["total"]) for r in table.to_pylist()}


def expected_for(sink_name: str, ref: Reference) -> dict:
    return {"streak_sql": ref.streak, "recent_sql": ref.recent, "visits_sql": ref.visits}.get(sink_name, ref.per_user)


def check(ws) -> dict[str, tuple[int, int]]:
    """(lost, duplicated) per sink against the reference along the epochs of the newest checkpoint the sink
    committed: a row missing or wrong is lost, a row of a dropped or never seen key is duplicated."""
    from sqlalchemy import func, select

    from coordinator.catalog.models import SinkWatermark
    from tests.sink_check import epoch_cuts, wrong_and_extra

    root = source.input_dir(ws.settings.data_dir, ws.job.name)
    found = {}
    for sink in ws.job.sinks:
        with ws.store.sessions() as s:
            at = s.scalar(select(func.max(SinkWatermark.checkpoint_id)).where(
                SinkWatermark.job == ws.job.name, SinkWatermark.sink == sink.name))
        if at is None:
            continue
        expected = expected_for(sink.name, reference(root, epoch_cuts(ws.store, ws.job.name, at)))
        found[sink.name] = wrong_and_extra(expected, sink_rows(sink.name, sink.target(ws.settings.database_url).read()))
    return found
