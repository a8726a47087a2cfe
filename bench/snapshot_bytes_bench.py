"""Bytes per checkpoint of a job with a lookup join and a window: do they follow the epoch, or the state?

    python bench/snapshot_bytes_bench.py [--users 500] [--views 200] [--epochs 10] [--out FILE]

The page_views example (views joined with users, counted per 5 minutes, country and page) with
``--users`` new users a batch (10x the example's 50): the join's state keeps every user's row, so it
grows by ``--users`` rows an epoch, while an epoch changes a few hundred rows. Each epoch lands, is
injected and runs in a process-less run of its own (as one Airflow DAG run processes it: the next run
restores the checkpoint), on local[2], twice: with the job's policy (incremental snapshots; a window's
and a join's deltas taken against their base's state, ``spark_jobs/state/frames/state_diff.py``) and with
``full_snapshot_every=1`` (every snapshot full: what each one wrote before). Per checkpoint and
operator: the rows and bytes each writes (from the catalog's acks), and the state's rows (the full
run's). Both runs' sinks must be equal (else exit 1, no figures written). Prints a table and writes
bench/results/snapshot_bytes.json.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from absreplay_examples import page_views_data  # noqa: E402
from absreplay_examples.page_views import job as page_views  # noqa: E402
from bench.kit import options  # noqa: E402
from coordinator.catalog.db import make_engine, upgrade  # noqa: E402
from coordinator.catalog.models import Job  # noqa: E402
from coordinator.checkpoints.coordinator import CheckpointCoordinator  # noqa: E402
from coordinator.checkpoints.store import CheckpointStore  # noqa: E402
from coordinator.settings import Settings  # noqa: E402
from coordinator.sources import source  # noqa: E402

console = Console(width=150)
MODES = ("incremental", "full")


def run_mode(spark, root: Path, mode: str, args: argparse.Namespace) -> dict:
    """Every epoch in a run of its own; per checkpoint and operator, what its snapshot wrote."""
    from spark_jobs.run.runner import EpochRunner
    from coordinator.modes import SnapshotMode

    os.environ["ABS_HOME"] = str(root)  # the Delta sink's default location
    settings = Settings.from_env({"ABS_HOME": str(root)})
    upgrade(settings.database_url)
    store = CheckpointStore(make_engine(settings.database_url))
    job = page_views.definition("absreplay_examples.page_views")
    coordinator = CheckpointCoordinator(store, job, settings.data_dir, settings.state_uri)
    store.register_job(job)
    if mode == "full":
        with store.sessions.begin() as s:
            s.get(Job, job.name).full_snapshot_every = 1
    stateful = [st.operator for st in job.states]
    checkpoints = []
    for batch in range(args.epochs):
        page_views_data.land(source.input_dir(settings.data_dir, job.name), batch, views=args.views,
                             users=args.users)
        coordinator.inject()
        report = EpochRunner(spark, store, job, settings.data_dir, settings.state_uri, mode=SnapshotMode.ASYNC).run()
        coordinator.finalize()
        failed = [t.checkpoint_id for t in report.snapshots if t.error]
        if failed:
            raise SystemExit(f"{mode}: snapshots failed: {failed}")
        for t in report.snapshots:
            acks = [a for a in store.acks(job.name, t.checkpoint_id) if a.operator in stateful]
            point = {"checkpoint": t.checkpoint_id, "epoch_s": report.epochs[0].process_s, "async_ms": t.async_ms}
            for op in stateful:
                mine = [a for a in acks if a.operator == op]
                point[op] = {"rows": sum(a.state_rows for a in mine), "bytes": sum(a.state_bytes for a in mine),
                             "full": all(a.base_checkpoint_id is None for a in mine)}
            checkpoints.append(point)
            console.print(f"  {mode}, checkpoint {t.checkpoint_id}: " + ", ".join(
                f"{op} {point[op]['rows']:,} rows / {point[op]['bytes']:,} B"
                f"{' (full)' if point[op]['full'] else ''}" for op in stateful))
    with store.engine.connect() as c:
        rows = sorted(map(tuple, c.execute(text(
            "SELECT country, page, window_start, window_end, views FROM page_views_per_5_minutes")).all()))
    return {"checkpoints": checkpoints, "operators": stateful,
            "sink_sha256": hashlib.sha256(repr(rows).encode()).hexdigest(), "sink_rows": len(rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=500, help="new users a batch (the example lands 50)")
    ap.add_argument("--views", type=int, default=200, help="views a batch")
    ap.add_argument("--epochs", type=int, default=10)
    args = options.parse(ap, "snapshot_bytes")
    if args.quick:
        args.users, args.epochs = 100, 4

    from spark_jobs.session import build_session

    base = Path(tempfile.mkdtemp(prefix="abs-snapshot-bytes-"))
    spark = build_session("abs-snapshot-bytes", 2, "local[2]")
    try:
        runs = {mode: run_mode(spark, base / mode, mode, args) for mode in MODES}
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    if runs["incremental"]["sink_sha256"] != runs["full"]["sink_sha256"]:
        raise SystemExit("the incremental and the full run's sinks differ: no figures")
    operators = runs["full"]["operators"]
    table = Table(title=f"page_views, {args.users:,} new users and {args.views:,} views an epoch, local[2]")
    table.add_column("checkpoint")
    for op in operators:
        table.add_column(f"{op}: state rows")
        table.add_column(f"{op}: incremental rows / bytes")
        table.add_column(f"{op}: full bytes")
    per_op: dict[str, list[float]] = {op: [] for op in operators}
    for inc, full in zip(runs["incremental"]["checkpoints"], runs["full"]["checkpoints"], strict=True):
        cells = [str(inc["checkpoint"])]
        for op in operators:
            i, f = inc[op], full[op]
            cells += [f"{f['rows']:,}", f"{i['rows']:,} / {i['bytes']:,}" + (" (full)" if i["full"] else ""),
                      f"{f['bytes']:,}"]
            if not i["full"] and f["bytes"]:
                per_op[op].append(i["bytes"] / f["bytes"])
        table.add_row(*cells)
    console.print(table)
    last_inc, last_full = runs["incremental"]["checkpoints"][-1], runs["full"]["checkpoints"][-1]
    summary = {op: {"median_incremental_over_full_bytes": statistics.median(r) if r else None,
                    "last_incremental_bytes": last_inc[op]["bytes"], "last_full_bytes": last_full[op]["bytes"],
                    "last_state_rows": last_full[op]["rows"]} for op, r in per_op.items()}
    for op, s in summary.items():
        ratio = s["median_incremental_over_full_bytes"]
        console.print(f"{op}: a delta writes {'-' if ratio is None else f'{ratio:.1%}'} of a full snapshot's bytes "
                      f"(median); at the last checkpoint {s['last_incremental_bytes']:,} B against "
                      f"{s['last_full_bytes']:,} B for {s['last_state_rows']:,} rows of state")
    results = {"job": "page_views", "users_per_epoch": args.users, "views_per_epoch": args.views,
               "epochs": args.epochs, "quick": args.quick, "summary": summary, "sink_rows": runs["full"]["sink_rows"],
               "runs": {mode: r["checkpoints"] for mode, r in runs.items()}}
    options.write(args.out, results)
    console.print(f"written to {args.out}")


if __name__ == "__main__":
    main()
