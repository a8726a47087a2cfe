"""connected_components benchmark: back-edge log size and snapshot time against state size.

    python bench/cc_bench.py [--vertices 100000] [--edges 150000] [--epochs 10] [--rounds 4]
                             [--modes async,sync]

A random graph (uniform edges over ``--vertices`` ids) lands in ``--epochs``
equal batches, one barrier each; one processing run per snapshot mode (catch-up,
local[2], SQLite catalog, local state root) processes them with ``--rounds``
loop rounds per epoch, then empty barriers drain the loop. Per epoch it reports:
state rows (vertices so far) and the snapshot written (rows, bytes, full or
incremental), back-edge log n (records, bytes), the snapshot's synchronous and
asynchronous phases (ms; state and log together), the part of them spent writing
the log, and the epoch's processing time (its rounds). Prints a table per mode
and writes bench/results/connected_components.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from absreplay_examples.sample_edges import land_edges  # noqa: E402
from absreplay_examples.union_find import labels_at, read_edges  # noqa: E402
from coordinator.checkpoints import back_edge_logs  # noqa: E402
from coordinator.sources import source  # noqa: E402
from coordinator.catalog.db import make_engine, upgrade  # noqa: E402
from coordinator.checkpoints.coordinator import CheckpointCoordinator  # noqa: E402
from absreplay_examples.definitions import connected_components  # noqa: E402
from coordinator.settings import Settings  # noqa: E402
from coordinator.checkpoints.store import CheckpointStore  # noqa: E402

console = Console(width=160)
MAX_DRAIN_EPOCHS = 30


def run_mode(spark, root: Path, mode: str, args: argparse.Namespace) -> dict:
    from spark_jobs.run.runner import EpochRunner
    from coordinator.modes import SnapshotMode

    settings = Settings.from_env({"ABS_HOME": str(root / mode)})
    upgrade(settings.database_url)
    store = CheckpointStore(make_engine(settings.database_url))
    job = connected_components(loop_rounds=args.rounds)
    coordinator = CheckpointCoordinator(store, job, settings.data_dir, settings.state_uri)
    input_dir = source.input_dir(settings.data_dir, job.name)
    per_partition = args.edges // args.epochs // 2
    for batch in range(args.epochs):
        land_edges(input_dir, batch, per_partition, args.vertices, seed=args.seed)
        coordinator.inject()

    def process() -> list[dict]:
        runner = EpochRunner(spark, store, job, settings.data_dir, settings.state_uri, mode=SnapshotMode(mode))
        report = runner.run()
        coordinator.finalize()
        timings = {t.checkpoint_id: t for t in report.snapshots}
        rows = []
        for e in report.epochs:
            t = timings[e.checkpoint_id]
            cut = store.cut(job.name, e.checkpoint_id)
            logs = back_edge_logs.of_checkpoint(store.sessions, job.name, e.checkpoint_id)
            rows.append({
                "checkpoint": e.checkpoint_id,
                "edges_total": len(read_edges(input_dir, cut)),
                "state_rows": len(labels_at(input_dir, cut)),
                "snapshot_rows": t.state_rows,
                "snapshot_bytes": t.state_bytes,
                "full": t.full,
                "back_edge_records": sum(h.records for h in logs),
                "back_edge_bytes": sum(h.bytes for h in logs),
                "sync_ms": t.sync_ms,
                "async_ms": t.async_ms,
                "back_edge_write_ms": t.back_edge_ms,
                "epoch_ms": int(e.process_s * 1000),
                "error": t.error,
            })
        return rows

    t0 = time.perf_counter()
    rows = process()
    catch_up_s = time.perf_counter() - t0
    drained = 0
    while rows[-1]["back_edge_records"] and drained < MAX_DRAIN_EPOCHS:
        coordinator.inject()  # an empty epoch: the loop drains its log
        rows += process()
        drained += 1
    return {"mode": mode, "catch_up_s": round(catch_up_s, 2), "drain_epochs": drained, "epochs": rows}


def table(result: dict) -> Table:
    t = Table(title=f"connected_components, snapshots {result['mode']}: {result['catch_up_s']} s for the landing "
                    f"epochs (one run), {result['drain_epochs']} empty epoch(s) to drain the loop")
    cols = ("chk", "edges", "state rows", "snap rows", "snap KiB", "full", "log records", "log KiB",
            "log/state", "sync ms", "async ms", "log write ms", "epoch ms")
    for c in cols:
        t.add_column(c, justify="right")
    for r in result["epochs"]:
        t.add_row(
            str(r["checkpoint"]), f"{r['edges_total']:,}", f"{r['state_rows']:,}", f"{r['snapshot_rows']:,}",
            f"{r['snapshot_bytes'] / 1024:,.0f}", "yes" if r["full"] else "inc", f"{r['back_edge_records']:,}",
            f"{r['back_edge_bytes'] / 1024:,.0f}", f"{r['back_edge_records'] / max(r['state_rows'], 1):.2f}",
            str(r["sync_ms"]), str(r["async_ms"]), str(r["back_edge_write_ms"]), str(r["epoch_ms"]),
        )
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vertices", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=150_000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--modes", default="async,sync")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "connected_components.json"))
    args = parser.parse_args()

    from spark_jobs.session import build_session

    spark = build_session("cc-bench", 2, "local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    results = []
    with tempfile.TemporaryDirectory(prefix="cc-bench-") as tmp:
        for mode in args.modes.split(","):
            result = run_mode(spark, Path(tmp), mode, args)
            results.append(result)
            console.print(table(result))
    spark.stop()
    out = {
        "vertices": args.vertices, "edges": args.edges, "epochs": args.epochs, "loop_rounds": args.rounds,
        "master": "local[2]", "results": results,
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
