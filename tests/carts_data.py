"""Input for tests/jobs/open_carts.py and its reference in plain Python (never the job's code)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from coordinator.sources import source
from tests.segment_files import land as land_segment
from tests.segment_files import partition_lines

USERS = 120
#: users active in one batch: an epoch touches a few of the carts, so its snapshot is a delta
FIRST = 60
ACTIVE = 12
#: users of the batch before whose carts a batch closes at its end
CLOSING = 4
PARTITIONS = 2


def active_users(batch: int) -> list[int]:
    """The users with events in ``batch``: many in the first, a few in each later one."""
    return random.Random(104_729 * batch + 3).sample(range(USERS), FIRST if batch == 0 else ACTIVE)


def land(input_dir: Path, batch: int, events: int = 160) -> None:
    """Batch ``batch``'s events, as one segment per partition. A user's events all go to one partition and
    every event of a batch is later than the batches before: per user, event-time order is arrival order."""
    rng = random.Random(7919 * batch + 1)
    rows: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    active = active_users(batch)
    # the batch ends with checkouts of users of the batch before: carts opened earlier are deleted
    closing = [] if batch == 0 else [(u, "checkout") for u in active_users(batch - 1)[:CLOSING]]
    picks = [(rng.choice(active), "checkout" if rng.random() < 0.12 else "add") for _ in range(events * len(active)
                                                                                          // ACTIVE)]
    for i, (user, kind) in enumerate(picks + closing):
        ts = batch * 1_000_000 + i
        rows[user % PARTITIONS].append(json.dumps({"user": f"u{user}", "item": f"i{rng.randrange(50)}",
                                                   "kind": kind, "ts": ts}))
    for p, lines in rows.items():
        land_segment(input_dir / f"p{p}" / f"seg-{batch:05d}.json", lines)


def reference(input_dir: Path, cut: dict[str, int]) -> dict[str, tuple[int, int]]:
    """user -> (items, last_add) of every open cart after the events before ``cut`` (a partition's offset is
    its line number across its segments, in name order)."""
    carts: dict[str, tuple[int, int]] = {}
    for partition, end in cut.items():
        for line in partition_lines(input_dir / partition)[:end]:
            event = json.loads(line)
            items, last = carts.get(event["user"], (0, 0))
            carts[event["user"]] = (0, 0) if event["kind"] == "checkout" else (items + 1, event["ts"])
    return {user: cart for user, cart in carts.items() if cart[0]}


def sink_rows(table) -> dict[str, tuple[int, int]]:
    return {r["user"]: (r["items"], r["last_add"]) for r in table.to_pylist()}


def check(ws) -> dict[str, tuple[int, int]]:
    """(lost, duplicated) per sink against the reference at the sinks' high-water marks: a row missing or
    wrong is lost, a row of a closed (deleted) or never opened cart is duplicated."""
    from tests.sink_check import marks_of, wrong_and_extra

    root = source.input_dir(ws.settings.data_dir, ws.job.name)
    found = {}
    for sink in ws.job.sinks:
        cut = marks_of(ws, sink.name)
        expected = reference(root, cut)
        found[sink.name] = wrong_and_extra(expected, sink_rows(sink.target(ws.settings.database_url).read()))
    return found
