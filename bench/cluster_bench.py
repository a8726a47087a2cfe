"""Scaling on a Spark standalone cluster (the shape of the paper's Fig. 7): catch-up throughput of the
synthetic job with snapshots none and async, on a cluster of 1 worker and of 2 workers, 1 core each.

    python bench/cluster_bench.py [--workers 1,2] [--records-per-epoch 100000] [--epochs 3]
                                  [--keys 100000] [--repeat 3] [--worker-memory 2g] [--jvm-heap] [--quick]

For each cluster size N, a real standalone master and N workers (``--cores 1`` each) are started on
127.0.0.1 from the pyspark package (absreplay.commands.standalone_cluster, as the cluster test does), each JVM
in its own process group, stopped by group at the end even after a failure (a worker's JVM and its
executors outlive a killed wrapper). The driver, a fresh Python process per cluster size (so each
has a driver JVM of its own), connects with build_session(app, N, master URL): parallelism = total
cores = N. The project's code reaches the executors the way the command line ships it (the zip of
absreplay.commands.pyfiles.build_pyfiles_zip, added as a py-file; the JSON says whether the workers fetched it).

Each run is bench/synthetic_bench.py's catch-up: E epochs of S records landed, one barrier injected
per epoch, one EpochRunner run processes all of them and finalize commits the sink; records/s =
E*S / (process + finalize). Per cluster: one unmeasured warm-up run per mode (new executors), then
the modes take turns, --repeat times, and each keeps its median run. Every run's sink must equal every
other's, whatever the mode and the cluster size: the figures come from runs that computed the same.

Memory (bench/kit/memory.py), per run: the peak RSS of the driver's JVM, of the executor JVMs (summed),
of the Python workers (the executors' pyspark daemons and workers) and of the driver's Python;
--jvm-heap turns the Spark UI on so that the JVM heap peaks Spark reports (since the application
started) are added.

Read the figures for what they are: the reference machine has 2 cores. The driver's JVM and Python
(which plans every epoch and writes the catalog), the master, the workers' daemons and the executors
all share them, so "2 workers" is 2 executor JVMs on one machine, not 2 machines: its speed-up over
1 worker is bounded well below 2, and the async snapshot's writes compete with the next epoch for
the same cores. The output says so too.

Prints a table and writes bench/results/cluster.json.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from absreplay.commands.pyfiles import PREFIX, build_pyfiles_zip  # noqa: E402
from absreplay.commands.standalone_cluster import StandaloneCluster, standalone_cluster  # noqa: E402
from absreplay_examples import synthetic_data  # noqa: E402
from bench.kit import options  # noqa: E402
from bench.kit.memory import PeakMemory  # noqa: E402
from bench.kit.repetitions import summarize, turns  # noqa: E402
from bench.synthetic_bench import Run, machine  # noqa: E402

console = Console(width=150)
MODES = ("none", "async")
# the peak RSS columns: bench/kit/memory.py's kinds
PEAKS = {"driver_jvm": "driver JVM", "executor_jvms": "executor JVMs", "python_workers": "Python workers",
         "python_driver": "Python driver"}
CAVEAT = (f"one {os.cpu_count()}-core machine: the driver (JVM and Python), the master, the workers and their "
          f"executors share its {os.cpu_count()} cores, so N single-core workers are N executor JVMs on one "
          "machine, not N machines")


def shipped_pyfiles(cluster: StandaloneCluster) -> list[str]:
    """The py-files zips the workers fetched for the applications they ran."""
    return sorted({p.name for p in cluster.work_dir.glob(f"app-*/*/{PREFIX}*.zip")})


def granted_cores(cluster: StandaloneCluster, app_id: str) -> int:
    apps = [a for a in cluster.state().get("activeapps", []) if a.get("id") == app_id]
    return apps[0].get("cores", 0) if apps else 0


def measure_cluster(spark, base: Path, pool: Path, workers: int, epochs: int, records: int, repeat: int) -> dict:
    """Warm-up, then ``repeat`` turns of the modes on the session's cluster (parallelism ``workers``)."""
    samples: dict[str, list[dict]] = {m: [] for m in MODES}
    sinks = set()
    for rep, mode in [(-1, m) for m in MODES] + list(turns(MODES, repeat)):
        root = base / f"run-{mode}-{rep}"
        run = Run(root, pool, epochs, parallelism=workers)
        with PeakMemory() as mem:
            r = run.catch_up(spark, mode)
        shutil.rmtree(root, ignore_errors=True)
        sinks.add(r.pop("sink_sha256"))
        r["peak_mb"], r["processes"] = mem.peaks, mem.processes
        what = "warm-up" if rep < 0 else f"repetition {rep + 1}"
        console.print(f"  {workers} worker(s), {mode:>5} ({what}): {r['total_s']:.2f}s (restore {r['restore_s']:.2f}, "
                      f"epochs {sum(r['epoch_s']):.2f}, finalize {r['finalize_s']:.2f}); peak MB driver JVM "
                      f"{mem.peaks['driver_jvm']:.0f}, executors {mem.peaks['executor_jvms']:.0f} "
                      f"({mem.processes['executor_jvms']} JVMs)")
        if rep >= 0:
            samples[mode].append(r)
    modes = summarize(samples, records)
    return {"workers": workers, "cores_per_worker": 1, "parallelism": workers, "modes": modes,
            "async_over_none": modes["async"]["median_total_s"] / modes["none"]["median_total_s"],
            "sink_sha256": sorted(sinks)}


def run_cluster(base: Path, pool: Path, workers: int, args: argparse.Namespace, pyfiles: Path) -> dict:
    from spark_jobs.session import build_session

    with standalone_cluster(base / f"cluster-{workers}", workers, cores=1, memory=args.worker_memory) as cluster:
        console.print(f"cluster up: {cluster.master_url}, {workers} worker(s) x 1 core")
        spark = build_session(f"abs-cluster-bench-{workers}", workers, cluster.master_url)
        try:
            # as spark-submit --py-files: to every executor, and first on this driver's path
            spark.sparkContext.addPyFile(str(pyfiles))
            point = measure_cluster(spark, base / f"runs-{workers}", pool, workers, args.epochs,
                                    args.records_per_epoch * args.epochs, args.repeat)
            point["granted_cores"] = granted_cores(cluster, spark.sparkContext.applicationId)
            point["machine"] = machine(spark)
        finally:
            spark.stop()
        point["pyfiles_shipped"] = shipped_pyfiles(cluster)
    return point


def print_table(results: dict) -> None:
    table = Table(title=f"synthetic job on a standalone cluster, {results['records']:,} records in "
                        f"{results['epochs']} epochs, {results['keys']:,} keys (median of {results['repeat']})")
    heap = results["jvm_heap"]
    for col in ("workers x cores", "snapshots", "records/s", "total s", "restore s", "epochs s", "finalize s",
                *(f"{name} MB" for name in PEAKS.values()), *(("JVM heap MB driver | executors",) if heap else ())):
        table.add_column(col, justify="right")
    for point in results["clusters"]:
        for mode in MODES:
            r = point["modes"][mode]
            peak = r["peak_mb"]
            heap_mb = (" | ".join(f"{peak.get(k, 0):.0f}" for k in ("driver_jvm_heap", "executor_jvm_heap")),)
            table.add_row(f"{point['workers']} x 1", mode, f"{r['records_per_s']:,.0f}", f"{r['median_total_s']:.2f}",
                          f"{r['restore_s']:.2f}", f"{sum(r['epoch_s']):.2f}", f"{r['finalize_s']:.2f}",
                          *(f"{peak[k]:.0f}" for k in PEAKS), *(heap_mb if heap else ()))
    console.print(table)
    for point in results["clusters"]:
        console.print(f"{point['workers']} worker(s): async/none (time) {point['async_over_none']:.3f}; "
                      f"cores granted {point['granted_cores']}; py-files fetched by the workers: "
                      f"{', '.join(point['pyfiles_shipped']) or 'NONE'}")
    for mode, speedup in results.get("speedup", {}).items():
        console.print(f"speed-up {results['clusters'][-1]['workers']} vs {results['clusters'][0]['workers']} "
                      f"worker(s), snapshots {mode}: {speedup:.2f}x")
    console.print(f"[bold]note:[/bold] {CAVEAT}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2", help="cluster sizes (single-core workers), comma-separated")
    ap.add_argument("--records-per-epoch", type=int, default=100_000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--keys", type=int, default=100_000, help="distinct first-level keys")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions per mode and cluster (median)")
    ap.add_argument("--worker-memory", default="2g", help="memory a worker offers its executor")
    ap.add_argument("--jvm-heap", action="store_true", help="Spark UI on: add the JVM heap peaks it reports")
    args = options.parse(ap, "cluster")
    if args.quick:
        args.records_per_epoch, args.epochs, args.keys, args.repeat = 2_000, 2, 1_000, 1
    sizes = [int(w) for w in args.workers.split(",") if w]

    # the driver binds where the executors reach it; the executors' Python is this one (the project's venv)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    if args.jvm_heap:
        os.environ["ABS_SPARK_UI"] = "true"
    base = Path(tempfile.mkdtemp(prefix="abs-cluster-bench-"))
    started, load_before = time.perf_counter(), os.getloadavg()
    try:
        pool = base / "pool"
        for batch in range(args.epochs):
            synthetic_data.land(pool, batch, args.records_per_epoch, args.keys)
        pyfiles = build_pyfiles_zip(base / "pyfiles")
        # each cluster size in a fresh Python, with a driver JVM of its own: a JVM's RSS hardly ever
        # shrinks, and the next cluster must not start with this one's grown heap and warm JIT
        clusters = []
        for n in sizes:
            with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as one:
                clusters.append(one.submit(run_cluster, base, pool, n, args, pyfiles).result())
    finally:
        shutil.rmtree(base, ignore_errors=True)
    sinks = {h for c in clusters for h in c["sink_sha256"]}
    assert len(sinks) == 1, "the runs' sinks differ between modes or cluster sizes"
    results = {"job": "synthetic", "records_per_epoch": args.records_per_epoch, "epochs": args.epochs,
               "records": args.records_per_epoch * args.epochs, "keys": args.keys, "repeat": args.repeat,
               "jvm_heap": args.jvm_heap,
               "quick": args.quick, "caveat": CAVEAT, "machine": clusters[0].pop("machine"),
               "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
               "wall_s": time.perf_counter() - started, "clusters": clusters}
    for c in clusters[1:]:
        c.pop("machine")
    if len(clusters) > 1:
        results["speedup"] = {m: clusters[-1]["modes"][m]["records_per_s"] / clusters[0]["modes"][m]["records_per_s"]
                              for m in MODES}
    print_table(results)
    options.write(args.out, results)
    figure = args.out.with_name(args.out.stem + "_fig7.png")
    plot(results, figure)
    console.print(f"written to {args.out} and {figure}")


def plot(results: dict, path: Path) -> None:
    """The paper's Fig. 7 for this run: records/s of each mode against the cluster size, and async over none."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clusters = results["clusters"]
    sizes = [c["workers"] for c in clusters]
    fig, (ax, rel) = plt.subplots(1, 2, figsize=(11, 4.2))
    for mode, marker in zip(MODES, "os", strict=False):
        ax.plot(sizes, [c["modes"][mode]["records_per_s"] for c in clusters], marker=marker,
                label=f"snapshots {mode}")
    rel.plot(sizes, [c["modes"]["async"]["records_per_s"] / c["modes"]["none"]["records_per_s"] for c in clusters],
             marker="o")
    rel.axhline(1.0, color="grey", linewidth=0.8)
    ax.set(xlabel="single-core workers", ylabel="records/s (median run)", xticks=sizes,
           title=f"synthetic catch-up, {results['records']:,} records")
    rel.set(xlabel="single-core workers", ylabel="async / none throughput", xticks=sizes,
            title="snapshot overhead")
    ax.set_ylim(bottom=0)
    rel.set_ylim(0, 1.2)
    ax.legend()
    fig.text(0.5, 0.01, results["caveat"], ha="center", fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
