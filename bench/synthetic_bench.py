"""Synthetic-job benchmark (paper section 7, the shape of its Fig. 6): catch-up throughput with
snapshots none / sync / async, and the job declared with weak consistency (``weak``: loses records on
failure, not exactly-once; its operators snapshot on their own), against the snapshot interval
(records per epoch), in one run.

    python bench/synthetic_bench.py [--sizes 10000,30000,100000] [--epochs 3] [--keys 100000]
                                    [--repeat 5] [--large 1000000] [--large-epochs 2] [--large-repeat 3]

For each size S (records per epoch): E epochs of S records are landed and one barrier injected per
epoch, then one processing run catches up all of them (restore, E epochs, snapshots) and finalize
commits the sink; records/s = E*S / (process + finalize). Every run starts from a fresh catalog and
state root; the modes take turns within a repetition (order reversed every other one) and the median
of the repetitions is kept. One local[2] SparkSession at parallelism 2 for everything (the JVM is
started and warmed up once, not measured). Every run's sink must equal the other modes' for the same
input: the figures come from runs that computed the same thing.

``--large`` adds one size (10^6 by default) with fewer epochs and repetitions; 0 leaves it out.
Prints a table and writes bench/results/synthetic.json and bench/results/synthetic_fig6.png.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from absreplay_examples import synthetic_data  # noqa: E402
from absreplay_examples.definitions import synthetic  # noqa: E402
from bench.kit.repetitions import summarize, turns  # noqa: E402
from coordinator.catalog.db import make_engine, upgrade  # noqa: E402
from coordinator.checkpoints.coordinator import CheckpointCoordinator  # noqa: E402
from coordinator.checkpoints.store import CheckpointStore  # noqa: E402
from coordinator.settings import Settings  # noqa: E402
from coordinator.sources import source  # noqa: E402

console = Console(width=140)
#: weak: the job declared consistency="weak" (loses records on failure; not exactly-once), async writes
MODES = ("none", "sync", "async", "weak")
LABELS = {"none": "snapshots none", "sync": "snapshots sync", "async": "snapshots async (ABS)",
          "weak": "weak consistency (loses records on failure)"}
RESULTS = ROOT / "bench" / "results"


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def machine(spark) -> dict:
    import pyspark

    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {"cores": os.cpu_count(), "memory_gb": round(pages / 2**30, 1), "python": platform.python_version(),
            "spark": spark.version, "pyspark": pyspark.__version__, "platform": platform.platform(),
            "master": spark.sparkContext.master}


class Run:
    """One catch-up: a fresh catalog and state root, the pool's first ``epochs`` batches landed, one
    barrier injected after each; the job runs at ``parallelism`` subtasks."""

    def __init__(self, root: Path, pool: Path, epochs: int, parallelism: int = 2, weak: bool = False) -> None:
        self.settings = Settings.from_env({"ABS_HOME": str(root)})
        upgrade(self.settings.database_url)
        self.engine = make_engine(self.settings.database_url)
        self.store = CheckpointStore(self.engine)
        self.job = synthetic(parallelism=parallelism)
        if weak:
            self.job = replace(self.job, consistency="weak")
        self.coordinator = CheckpointCoordinator(self.store, self.job, self.settings.data_dir, self.settings.state_uri)
        self.input = source.input_dir(self.settings.data_dir, self.job.name)
        for batch in range(epochs):
            for seg in sorted(pool.glob(f"p*/seg-{batch:06d}.csv")):
                (self.input / seg.parent.name).mkdir(parents=True, exist_ok=True)
                shutil.copy(seg, self.input / seg.parent.name / seg.name)
            self.coordinator.inject()

    def catch_up(self, spark, mode: str) -> dict:
        from spark_jobs.run.runner import EpochRunner
        from coordinator.modes import SnapshotMode

        runner = EpochRunner(spark, self.store, self.job, self.settings.data_dir, self.settings.state_uri,
                             mode=SnapshotMode("async" if mode == "weak" else mode))
        t0 = time.perf_counter()
        report = runner.run()
        t1 = time.perf_counter()
        self.coordinator.finalize()
        t2 = time.perf_counter()
        failed = [t.checkpoint_id for t in report.snapshots if t.error]
        assert not failed, f"{mode}: snapshots failed: {failed}"
        with self.engine.connect() as c:
            rows = c.execute(text("SELECT k3, total, updates, peak FROM synthetic_out ORDER BY k3")).all()
        self.engine.dispose()
        return {
            "process_s": t1 - t0, "finalize_s": t2 - t1, "total_s": t2 - t0,
            "restore_s": report.restore_s, "epoch_s": [e.process_s for e in report.epochs],
            "snapshot_sync_ms": [t.sync_ms for t in report.snapshots],
            "snapshot_async_ms": [t.async_ms for t in report.snapshots],
            "state_bytes": du(Path(self.settings.state_uri.removeprefix("file://"))),
            "sink_rows": len(rows),
            "sink_sha256": hashlib.sha256(repr([tuple(r) for r in rows]).encode()).hexdigest(),
        }


def generate(pool: Path, size: int, epochs: int, keys: int) -> None:
    for batch in range(epochs):
        synthetic_data.land(pool, batch, size, keys)


def measure_size(spark, base: Path, size: int, epochs: int, keys: int, repeat: int) -> dict:
    pool = base / f"pool-{size}"
    t0 = time.perf_counter()
    generate(pool, size, epochs, keys)
    console.print(f"{size:,} records per epoch x {epochs} epochs ({keys:,} keys): generated in "
                  f"{time.perf_counter() - t0:.1f}s")
    samples: dict[str, list[dict]] = {m: [] for m in MODES}
    for rep, mode in turns(MODES, repeat):
        root = base / f"run-{size}-{mode}-{rep}"
        run = Run(root, pool, epochs, weak=mode == "weak")
        r = run.catch_up(spark, mode)
        shutil.rmtree(root, ignore_errors=True)
        console.print(f"  {mode:>5} (repetition {rep + 1}): {r['total_s']:.2f}s "
                      f"(process {r['process_s']:.2f} + finalize {r['finalize_s']:.2f})")
        samples[mode].append(r)
    shutil.rmtree(pool, ignore_errors=True)
    sinks = {r["sink_sha256"] for runs in samples.values() for r in runs}
    assert len(sinks) == 1, f"{size:,} records per epoch: the modes' sinks differ"
    records = size * epochs
    return {"records_per_epoch": size, "epochs": epochs, "records": records, "modes": summarize(samples, records)}


def snapshot_ms(run: dict) -> float:
    """Median per epoch of a run's snapshot (synchronous phase + write and ack)."""
    return statistics.median(s + a for s, a in zip(run["snapshot_sync_ms"], run["snapshot_async_ms"], strict=True))


def plot(points: list[dict], path: Path, title: str) -> None:
    """Left: throughput per mode against records per epoch; right: the same relative to ``none``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, rel) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [p["records_per_epoch"] for p in points]
    for mode, marker in zip(MODES, ("o", "s", "^", "x"), strict=True):
        ys = [p["modes"][mode]["records_per_s"] for p in points]
        ax.plot(xs, ys, marker=marker, label=LABELS[mode])
        rel.plot(xs, [y / p["modes"]["none"]["records_per_s"] for y, p in zip(ys, points, strict=True)],
                 marker=marker, label=LABELS[mode])
    ax.set_yscale("log")
    ax.set_ylabel("throughput (records/s, median run)")
    rel.set_ylabel("throughput / throughput without snapshots")
    rel.set_ylim(0, 1.15)
    for a in (ax, rel):
        a.set_xscale("log")
        a.set_xlabel("records per epoch (snapshot interval)")
        a.grid(True, which="both", alpha=0.3)
        a.legend()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,30000,100000", help="records per epoch, comma-separated")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per catch-up run")
    ap.add_argument("--keys", type=int, default=100_000, help="distinct first-level keys")
    ap.add_argument("--repeat", type=int, default=5, help="repetitions per mode and size (median)")
    ap.add_argument("--large", type=int, default=1_000_000, help="one more size, run fewer times (0: none)")
    ap.add_argument("--large-epochs", type=int, default=2)
    ap.add_argument("--large-repeat", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "synthetic.json"))
    ap.add_argument("--figure", default=str(RESULTS / "synthetic_fig6.png"))
    args = ap.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]

    from spark_jobs.session import build_session

    base = Path(tempfile.mkdtemp(prefix="abs-synthetic-bench-"))
    started = time.perf_counter()
    load_before = os.getloadavg()
    spark = build_session("abs-synthetic-bench", 2, "local[2]")
    try:
        console.print("warming up the JVM (two catch-up runs per mode, not measured)")
        measure_size(spark, base / "warm-up", sizes[0], args.epochs, args.keys, 2)
        points = [measure_size(spark, base, s, args.epochs, args.keys, args.repeat) for s in sizes]
        if args.large:
            points.append(measure_size(spark, base, args.large, args.large_epochs, args.keys, args.large_repeat))
        results = {"job": "synthetic", "parallelism": 2, "keys": args.keys,
                   "machine": machine(spark), "load_average_before": list(load_before)}
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    results["load_average_after"] = list(os.getloadavg())
    results["wall_s"] = time.perf_counter() - started
    results["points"] = points
    for p in points:
        none_s = p["modes"]["none"]["median_total_s"]
        p["async_over_none"] = p["modes"]["async"]["median_total_s"] / none_s
        p["sync_over_none"] = p["modes"]["sync"]["median_total_s"] / none_s
        p["weak_over_none"] = p["modes"]["weak"]["median_total_s"] / none_s

    m = results["machine"]
    title = (f"synthetic job, parallelism 2, {args.keys:,} keys, {m['master']} "
             f"({m['cores']} cores, Spark {m['spark']})")
    table = Table(title=title)
    for col in ("records/epoch", "epochs", "runs", *(f"{mode} records/s" for mode in MODES),
                "async/none", "sync/none", "weak/none", "snapshot ms/epoch sync | async | weak", "state MB"):
        table.add_column(col, justify="right")
    for p in points:
        a = p["modes"]["async"]
        table.add_row(
            f"{p['records_per_epoch']:,}", str(p["epochs"]), str(len(a["all_total_s"])),
            *(f"{p['modes'][mode]['records_per_s']:,.0f}" for mode in MODES),
            f"{p['async_over_none']:.2f}", f"{p['sync_over_none']:.2f}", f"{p['weak_over_none']:.2f}",
            " | ".join(f"{snapshot_ms(p['modes'][mode]):.0f}" for mode in ("sync", "async", "weak")),
            f"{a['state_bytes'] / 1e6:.1f}",
        )
    console.print(table)
    console.print(f"load average before {load_before[0]:.1f}, after {results['load_average_after'][0]:.1f}; "
                  f"whole benchmark {results['wall_s']:.0f}s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    plot(points, Path(args.figure), title)
    console.print(f"written to {args.out} and {args.figure}")


if __name__ == "__main__":
    main()
