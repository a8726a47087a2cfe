"""Sample input for the page_views example: views and users as JSON lines, landed atomically.

Deterministic per batch. Event time moves forward about three minutes a batch; a few views are
far behind (late: dead letters), and some views' users land only in a later batch (they wait in
the join). Each user keeps one country.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

COUNTRIES = ("fr", "de", "jp", "br", "us")
PAGES = ("/", "/pricing", "/docs", "/blog")
MINUTE = 60_000


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, path)


def land(input_dir: Path, batch: int, views: int = 200, users: int = 50, partitions: int = 2) -> int:
    """Batch ``batch`` under ``input_dir/{views,users}/p<i>/``; returns the records landed."""
    rng = random.Random(batch)
    known = (batch + 1) * users
    landed = 0
    for part in range(partitions):
        rows = [json.dumps({"user": u, "country": COUNTRIES[u % len(COUNTRIES)]})
                for u in range(batch * users, known) if u % partitions == part]
        _write(input_dir / "users" / f"p{part}" / f"seg-{batch:04d}", rows)
        base = batch * 3 * MINUTE
        seen = []
        for _ in range(views // partitions):
            ts = base + rng.randrange(-MINUTE, 3 * MINUTE)
            if rng.random() < 0.03:
                ts = base - 20 * MINUTE
            seen.append(json.dumps({"user": rng.randrange(0, int(known * 1.2)), "page": rng.choice(PAGES),
                                    "ts": max(ts, 0)}))
        _write(input_dir / "views" / f"p{part}" / f"seg-{batch:04d}", seen)
        landed += len(rows) + len(seen)
    return landed
