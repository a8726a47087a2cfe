"""Record-id store benchmark: how fast ids are deduplicated, and whether the Bloom filters pay off.

    python bench/id_store_bench.py [--ids 1000000] [--duplicates 0.1] [--batch 50000]
                                   [--ids-per-window 100000] [--database-url URL]

A producer sends ``--ids`` records whose event time advances so that each
one-hour window holds ``--ids-per-window`` of them; ``--duplicates`` of the
records are re-sent copies of a recent record (same id, same event time, within
the allowed lateness, so they must be found, not dropped as late). Records go
through ``IdStore.admit`` and ``gc`` in transactions of ``--batch`` records,
as inject does, on a fresh SQLite catalog (or ``--database-url``). Prints the
figures and writes bench/results/id_store.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from coordinator.catalog.db import make_engine, safe_url, upgrade  # noqa: E402
from coordinator.sources.id_store import Arrival, IdStore, IdStoreCounters, IdStorePolicy, Verdict  # noqa: E402
from absreplay_examples.definitions import wordcount  # noqa: E402
from coordinator.checkpoints.store import CheckpointStore  # noqa: E402

console = Console(width=120)
# copies re-send one of this many most recent records: well inside the allowed lateness
RECENT = 50_000


def arrivals(total: int, duplicate_rate: float, ids_per_window: int, policy: IdStorePolicy, seed: int = 1):
    """(arrival, is_copy) for ``total`` records; event time advances one window per ``ids_per_window`` ids."""
    rng = random.Random(seed)
    step = policy.window_seconds / ids_per_window
    originals: list[tuple[str, int]] = []
    for n in range(total):
        partition = f"p{n % 4}"
        if originals and rng.random() < duplicate_rate:
            rid, ts = originals[-1 - rng.randrange(min(RECENT, len(originals)))]
            yield Arrival(rid, ts, partition, n, 0), True
            continue
        rid, ts = f"order-{len(originals):09d}-{rng.getrandbits(32):08x}", int(1_700_000_000 + len(originals) * step)
        originals.append((rid, ts))
        yield Arrival(rid, ts, partition, n, 0), False


def run(url: str, total: int, duplicate_rate: float, batch_size: int, ids_per_window: int) -> dict:
    store = CheckpointStore(make_engine(url))
    job = wordcount()
    store.register_job(job)
    policy = job.id_store
    totals = IdStoreCounters()
    copies = wrong = batches = 0
    batch: list[Arrival] = []
    expected: set[int] = set()
    admit_s = 0.0

    def flush() -> None:
        nonlocal wrong, batches, admit_s
        t0 = time.perf_counter()
        with store.sessions.begin() as s:
            ids = IdStore(s, job.name, policy)
            rejected = ids.admit(batch)
            ids.gc()
        admit_s += time.perf_counter() - t0
        totals.add(ids.counters)
        found = {r.arrival.offset for r in rejected if r.verdict is Verdict.DUPLICATE}
        wrong += len(found ^ {a.offset for a in batch if a.offset in expected})
        batches += 1
        batch.clear()

    t_start = time.perf_counter()
    for arrival, is_copy in arrivals(total, duplicate_rate, ids_per_window, policy):
        batch.append(arrival)
        if is_copy:
            copies += 1
            expected.add(arrival.offset)
        if len(batch) == batch_size:
            flush()
    if batch:
        flush()
    wall_s = time.perf_counter() - t_start
    with store.engine.connect() as c:
        live_ids = c.execute(text("SELECT count(*) FROM record_ids")).scalar_one()
        filter_bytes = c.execute(text("SELECT coalesce(sum(length(bits)), 0) FROM id_filters")).scalar_one()
    store.engine.dispose()
    return {
        "catalog": safe_url(url).split(":", 1)[0],
        "records": total,
        "duplicate_rate": duplicate_rate,
        "batch": batch_size,
        "batches": batches,
        "policy": {
            "window_seconds": policy.window_seconds,
            "allowed_lateness_seconds": policy.allowed_lateness_seconds,
            "expected_ids_per_window": policy.expected_ids_per_window,
            "false_positive_rate": policy.false_positive_rate,
            "ids_per_window": ids_per_window,
        },
        "copies_sent": copies,
        "misjudged": wrong,
        "admit_s": admit_s,
        "wall_s": wall_s,
        "ids_per_s": total / admit_s,
        "live_ids": live_ids,
        "live_filter_bytes": filter_bytes,
        "counters": totals.as_dict(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", type=int, default=1_000_000)
    ap.add_argument("--duplicates", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument("--ids-per-window", type=int, default=100_000)
    ap.add_argument("--database-url", help="default: a fresh SQLite file in a temporary directory")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "id_store.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="absreplay-id-bench-") as tmp:
        url = args.database_url or f"sqlite:///{tmp}/catalog.db"
        upgrade(url)
        result = run(url, args.ids, args.duplicates, args.batch, args.ids_per_window)
    c = result["counters"]
    table = Table(title=f"id store: {result['records']:,} records, {result['copies_sent']:,} copies, {result['catalog']}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("ids/s (admit + gc + commit)", f"{result['ids_per_s']:,.0f}"),
        ("time in the id store", f"{result['admit_s']:.1f} s ({result['batches']} batches)"),
        ("bloom negatives (no SQL lookup)", f"{c['bloom_negatives']:,} ({c['bloom_negative_rate']:.2%} of checked)"),
        ("bloom positives", f"{c['bloom_positives']:,}"),
        ("exact lookups / queries", f"{c['exact_lookups']:,} / {c['lookup_queries']:,}"),
        ("false positives", f"{c['false_positives']:,} ({c['false_positives'] / max(1, c['bloom_negatives'] + c['false_positives']):.2%} of new ids)"),
        ("duplicates found (in batch)", f"{c['duplicates']:,} ({c['batch_duplicates']:,})"),
        ("late", f"{c['late']:,}"),
        ("misjudged records", f"{result['misjudged']:,}"),
        ("filters created / rebuilt", f"{c['filters_created']} / {c['filters_rebuilt']}"),
        ("gc: ids / filters deleted", f"{c['gc_ids']:,} / {c['gc_filters']}"),
        ("live ids / filter bytes at the end", f"{result['live_ids']:,} / {result['live_filter_bytes']:,}"),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
