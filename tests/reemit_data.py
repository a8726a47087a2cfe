"""Input for the tests' tiered_clicks job (tests/jobs), and its sinks recomputed in plain Python.

Batches land clicks (JSON lines) and tiers (CSV: user,tier) in two partitions each. A user's tier rows
always land in the same partition, at most one a batch, and a third of the users get a new tier in each
batch; one user has no tier until batch 1 (its clicks wait). What a sink holds at a cut does not depend
on where epochs end: every click before the cut whose user has a tier by then, with the user's latest
tier.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tests.segment_files import land as land_segment
from tests.segment_files import partition_lines

USERS = 8
JOB = "tiered_clicks"


def land(input_dir: Path, batch: int, clicks: int = 24) -> int:
    """Batch ``batch``'s tiers and clicks; returns how many clicks."""
    rng = random.Random(15_485_863 + batch)
    for part in range(2):
        users = {u for u in range(USERS) if u % 2 == part and ((u + batch) % 3 == 0 or (batch == 0 and u != 7))}
        if batch == 1 and part == 1:
            users.add(7)  # its clicks of batch 0 waited for it
        land_segment(input_dir / "tiers" / f"p{part}" / f"seg-{batch:04d}",
                     [f"u{u},t{batch}-{rng.randrange(3)}" for u in sorted(users)])
        rows = [{"id": f"b{batch}-p{part}-{i}", "user": f"u{rng.randrange(USERS)}", "page": f"/{rng.randrange(4)}"}
                for i in range(clicks // 2)]
        land_segment(input_dir / "clicks" / f"p{part}" / f"seg-{batch:04d}", [json.dumps(r) for r in rows])
    return clicks


def reference(input_dir: Path, cut: dict[str, int]) -> dict[str, tuple[str, str, str]]:
    """id -> (user, page, tier) of every click before ``cut`` whose user has a tier by then."""
    tier: dict[str, str] = {}
    clicks = []
    for partition, end in sorted(cut.items()):
        lines = partition_lines(input_dir / partition)[:end]
        if partition.startswith("tiers/"):
            for line in lines:  # a user's rows are all in one partition, in order
                user, t = line.split(",")
                tier[user] = t
        else:
            clicks += [json.loads(line) for line in lines]
    return {c["id"]: (c["user"], c["page"], tier[c["user"]]) for c in clicks if c["user"] in tier}


def sink_rows(table) -> dict[str, tuple[str, str, str]]:
    rows = table.to_pylist()
    assert len({r["id"] for r in rows}) == len(rows)
    return {r["id"]: (r["user"], r["page"], r["tier"]) for r in rows}
