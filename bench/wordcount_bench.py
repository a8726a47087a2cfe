"""Wordcount benchmark: snapshot modes none / sync / async, against Spark Structured Streaming
(RocksDB and HDFS-backed state stores) and a plain batch job on the same data, in one run.

    python bench/wordcount_bench.py [--epochs 10] [--lines-per-epoch 100000] [--vocab 50000] [--repeat 2]
    python bench/wordcount_bench.py --quick      # tiny sizes: checks that it runs

Scenarios (one local[2] SparkSession, parallelism 2, JIT warmed up first):
  catch-up   E epochs injected, then one processing run (+ finalize: the sink commit) per snapshot
             mode, the modes taking turns --repeat times (median): records/s, the run's restore time
             and each epoch's time (RunReport.restore_s, epochs[].process_s).
  per-epoch  one epoch per run, E runs (restore, process, snapshot, finalize), snapshots async: each
             run's restore, epoch and finalize times.
  Spark SS   the same job in Structured Streaming: text source -> the job's own tokenizer
             (absreplay_examples.wordcount.tokenize) -> groupBy count, update mode, foreachBatch sink,
             Trigger.AvailableNow from its checkpoint, one epoch per run, E runs; once per state store,
             each with its own input, checkpoint and sink, the two taking turns epoch by epoch:
               rocksdb  RocksDBStateStoreProvider with changelog checkpointing (its best configuration),
               hdfs     the default HDFSBackedStateStoreProvider.
             The sink does our sink's work: our SqlTable sink upserts the changed counts into a table
             of the catalog (SQLite) with a commit record in the same transaction; this one upserts the
             batch's rows (update mode: the changed counts) into a SQLite table with INSERT ... ON
             CONFLICT DO UPDATE, in one transaction with the batch id as commit record, and skips a
             batch already committed. The JSON keeps each run's time, SS's own batch durations
             (durationMs) and the state files the checkpoint holds by kind (.changelog, .zip, .delta,
             .snapshot): the evidence of which store wrote it.
  batch      one plain batch job over all the input (counts written as Parquet), taking its turn with
             the catch-up modes --repeat times (median).
Every scenario's final counts must be equal (catch-up sinks, per-epoch sink, both SS sinks, the
batch output): the figures come from runs that computed the same thing.

Ratios, with the project's goal where there is one (the output says whether it is met):
  per_epoch_over_ss_rocksdb        median per-epoch run / median SS RocksDB run     goal <= 0.8
  per_epoch_over_ss_hdfs           median per-epoch run / median SS HDFS run
  catch_up_async_over_plain_batch  catch-up async (median) / plain batch (median)   goal <= 2
  async_over_none                  catch-up async / catch-up none (medians)         goal <= 1.05
  sync_over_none                   catch-up sync / catch-up none (medians)
Prints two tables and the ratios, and writes bench/results/wordcount.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from absreplay_examples.sample_data import land_batch  # noqa: E402
from bench import ss_anchor  # noqa: E402
from bench.kit import options  # noqa: E402
from bench.kit.catalog import WordcountCatalog  # noqa: E402
from bench.ss_anchor import digest, du, segments  # noqa: E402
from bench.kit.repetitions import summarize, turns  # noqa: E402
from bench.synthetic_bench import machine  # noqa: E402
from coordinator.settings import Settings  # noqa: E402

console = Console(width=150)
MODES = ("none", "sync", "async")
SINK_TABLE = "wordcount_counts"  # the job's SqlTable sink (absreplay_examples.wordcount)
SS_STORES = ss_anchor.SS_STORES
GOALS = {"per_epoch_over_ss_rocksdb": 0.8, "catch_up_async_over_plain_batch": 2.0, "async_over_none": 1.05}


class Scenario(WordcountCatalog):
    """A fresh catalog and state root whose source input is filled batch by batch from the pool."""

    def __init__(self, root: Path, pool: Path) -> None:
        self.root, self.pool = root, pool
        super().__init__(Settings.from_env({"ABS_HOME": str(root)}))

    def land(self, batch: int) -> None:
        for seg in segments(self.pool, batch):
            dest = self.input / seg.parent.name
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(seg, dest / seg.name)

    def run(self, spark, mode: str, max_epochs: int | None = None) -> dict:
        """One processing run and its finalize: wall times, and the RunReport's restore and epoch times."""
        from spark_jobs.run.runner import EpochRunner
        from coordinator.modes import SnapshotMode

        runner = EpochRunner(spark, self.store, self.job, self.settings.data_dir, self.settings.state_uri,
                             mode=SnapshotMode(mode), max_epochs=max_epochs)
        t0 = time.perf_counter()
        report = runner.run()
        t1 = time.perf_counter()
        self.coordinator.finalize()
        t2 = time.perf_counter()
        failed = [t.checkpoint_id for t in report.snapshots if t.error]
        assert not failed, f"{mode}: snapshots failed: {failed}"
        return {"process_s": t1 - t0, "finalize_s": t2 - t1, "total_s": t2 - t0, "restore_s": report.restore_s,
                "epoch_s": [e.process_s for e in report.epochs],
                "snapshot_ms": [t.sync_ms + t.async_ms for t in report.snapshots]}

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as c:
            return dict(c.execute(text(f"SELECT word, count FROM {SINK_TABLE}")).all())

    def state_bytes(self) -> int:
        return du(Path(self.settings.state_uri.removeprefix("file://")))


def catch_up(spark, base: Path, pool: Path, epochs: int, mode: str) -> dict:
    sc = Scenario(base / f"catchup-{mode}-{time.monotonic_ns()}", pool)
    for b in range(epochs):
        sc.land(b)
        sc.coordinator.inject()
    run = sc.run(spark, mode)
    run.update(state_bytes=sc.state_bytes(), counts_sha256=digest(sc.counts()))
    sc.engine.dispose()
    return run


def per_epoch(spark, base: Path, pool: Path, epochs: int) -> dict:
    sc = Scenario(base / "per-epoch", pool)
    runs = []
    for b in range(epochs):
        sc.land(b)
        sc.coordinator.inject()
        runs.append(sc.run(spark, "async", max_epochs=1))
    counts = sc.counts()
    sc.engine.dispose()
    return {"runs": runs, "run_s": [r["total_s"] for r in runs], "total_s": sum(r["total_s"] for r in runs),
            "state_bytes": sc.state_bytes(), "counts": counts}


def structured_streaming(base: Path, pool: Path, epochs: int) -> dict[str, dict]:
    """Both state stores, one epoch per run, each store in a process of its own (``bench.ss_anchor``): an
    anchor that dies (the HDFS-backed store holds its state on the JVM heap) is recorded with its error, and
    the other figures stand."""
    return {store: ss_anchor.run_isolated(store, base / f"ss-{store}", pool, epochs) for store in ss_anchor.SS_STORES}


def plain_batch(spark, pool: Path, out: Path) -> float:
    from pyspark.sql import functions as F

    from absreplay_examples.wordcount import tokenize

    t0 = time.perf_counter()
    lines = spark.read.text(sorted(str(p) for p in pool.glob("*/seg-*.txt"))).select(F.col("value").alias("line"))
    tokenize(lines).groupBy("word").count().write.mode("overwrite").parquet(str(out))
    return time.perf_counter() - t0


def parquet_counts(path: Path) -> dict[str, int]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return dict(zip(table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True))


def ratios(results: dict) -> dict[str, float | None]:
    """Each ratio; None against an anchor that failed (its error is in its results)."""
    cu, ss = results["catch_up"], results["structured_streaming"]
    none_s = cu["none"]["median_total_s"]
    ours = statistics.median(results["per_epoch"]["run_s"])

    last = results["per_epoch"]["run_s"][-1]

    def over(store: str) -> float | None:
        return None if "error" in ss[store] else ours / statistics.median(ss[store]["run_s"])

    def last_over(store: str) -> float | None:
        """At the last epoch, where the state is largest: SS's store grows with it, ours should not."""
        return None if "error" in ss[store] else last / ss[store]["run_s"][-1]

    return {
        "per_epoch_over_ss_rocksdb": over("rocksdb"),
        "per_epoch_over_ss_hdfs": over("hdfs"),
        "last_epoch_over_ss_rocksdb": last_over("rocksdb"),
        "catch_up_async_over_plain_batch": cu["async"]["median_total_s"] / results["plain_batch_s"],
        "async_over_none": cu["async"]["median_total_s"] / none_s,
        "sync_over_none": cu["sync"]["median_total_s"] / none_s,
    }


def med(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def print_tables(results: dict, title: str) -> None:
    cu, records = results["catch_up"], results["records"]
    table = Table(title=f"catch-up: {title}")
    for col in ("", *(f"snapshots {m}" for m in MODES), "plain batch"):
        table.add_column(col, justify="right")
    batch_s = results["plain_batch_s"]
    table.add_row("total s (median)", *(f"{cu[m]['median_total_s']:.2f}" for m in MODES), f"{batch_s:.2f}")
    table.add_row("records/s", *(f"{cu[m]['records_per_s']:,.0f}" for m in MODES), f"{records / batch_s:,.0f}")
    table.add_row("restore s", *(f"{cu[m]['restore_s']:.2f}" for m in MODES), "")
    table.add_row("epochs s (sum)", *(f"{sum(cu[m]['epoch_s']):.2f}" for m in MODES), "")
    table.add_row("epoch s (median)", *(med(cu[m]["epoch_s"]) for m in MODES), "")
    table.add_row("finalize s", *(f"{cu[m]['finalize_s']:.2f}" for m in MODES), "")
    table.add_row("state MB", *(f"{cu[m]['state_bytes'] / 1e6:.1f}" for m in MODES), "")
    console.print(table)

    pe, ss = results["per_epoch"], results["structured_streaming"]
    table = Table(title=f"one epoch per run ({results['epochs']} runs, medians): {title}")
    for col in ("", "ABS Replay (async)", "Spark SS, RocksDB + changelog", "Spark SS, HDFS-backed"):
        table.add_column(col, justify="right")
    def each(cell) -> list[str]:
        """A row's SS cells: ``cell`` of each store's results, or the error that stopped it."""
        return [f"{ss[s]['error']}"[:40] if "error" in ss[s] else cell(ss[s]) for s in SS_STORES]

    table.add_row("run s", med(pe["run_s"]), *each(lambda r: med(r["run_s"])))
    table.add_row("first run s", f"{pe['run_s'][0]:.2f}", *each(lambda r: f"{r['run_s'][0]:.2f}"))
    table.add_row("restore s", med([r["restore_s"] for r in pe["runs"]]), "", "")
    table.add_row("epoch s", med([s for r in pe["runs"] for s in r["epoch_s"]]),
                  *each(lambda r: med([b["triggerExecution"] / 1000 for run in r["runs"] for b in run["batches"]])))
    table.add_row("finalize s", med([r["finalize_s"] for r in pe["runs"]]), "", "")
    table.add_row("state / checkpoint MB", f"{pe['state_bytes'] / 1e6:.1f}",
                  *each(lambda r: f"{r['checkpoint_bytes'] / 1e6:.1f}"))
    table.add_row("state files", "", *each(lambda r: ", ".join(f"{n} {k or 'other'}"
                                                                for k, n in r["state_files"].items())))
    console.print(table)
    console.print("SS epoch s: the batch's triggerExecution (durationMs); run s: the whole AvailableNow "
                  "query, from building it to its end")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args = options.parse_epochs(ap, "wordcount", 10, "lines", 100_000, "catch-up repetitions per mode")

    from spark_jobs.session import build_session

    base = Path(tempfile.mkdtemp(prefix="abs-bench-"))
    pool = base / "pool"
    console.print(f"generating {args.epochs} x {args.lines_per_epoch:,} lines ({args.vocab:,}-word vocabulary) in {base}")
    for b in range(args.epochs):
        land_batch(pool, b, args.lines_per_epoch // 2, partitions=2, vocab_size=args.vocab, words_per_line=5)
    records = args.epochs * (args.lines_per_epoch // 2) * 2
    started, load_before = time.perf_counter(), os.getloadavg()
    spark = build_session("abs-bench", 2, "local[2]")
    try:
        console.print("warming up the JVM (one catch-up run; not measured)")
        catch_up(spark, base, pool, args.epochs, "async")
        results: dict = {"records": records, "epochs": args.epochs, "lines_per_epoch": args.lines_per_epoch,
                         "vocab": args.vocab, "quick": args.quick, "machine": machine(spark)}
        samples: dict[str, list[dict]] = {m: [] for m in MODES}
        batch_s: list[float] = []
        # the plain batch job takes its turn with the catch-up modes: their ratio is side by side
        for rep, mode in turns((*MODES, "batch"), args.repeat):
            if mode == "batch":
                console.print(f"plain batch job (repetition {rep + 1})")
                batch_s.append(plain_batch(spark, pool, base / "batch-out"))
                continue
            console.print(f"catch-up, snapshots {mode} (repetition {rep + 1})")
            samples[mode].append(catch_up(spark, base, pool, args.epochs, mode))
        results["catch_up"] = summarize(samples, records)
        results["plain_batch_s"], results["plain_batch_all_s"] = statistics.median(batch_s), batch_s
        console.print("one epoch per run (async)")
        results["per_epoch"] = per_epoch(spark, base, pool, args.epochs)
        batch_counts = parquet_counts(base / "batch-out")
    finally:
        spark.stop()
    try:
        console.print("Spark Structured Streaming, one epoch per run, RocksDB and HDFS-backed state stores, each "
                      "in its own process")
        results["structured_streaming"] = structured_streaming(base, pool, args.epochs)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    results["load_average_before"], results["load_average_after"] = list(load_before), list(os.getloadavg())
    results["wall_s"] = time.perf_counter() - started

    # every scenario computed the same counts (the dicts are not kept in the JSON: a digest is)
    found = {f"catch-up {mode} {i + 1}": r["counts_sha256"] for mode, runs in samples.items() for i, r in enumerate(runs)}
    found["per-epoch"] = digest(results["per_epoch"].pop("counts"))
    for store, r in results["structured_streaming"].items():
        if "error" not in r:
            found[f"ss-{store}"] = r.pop("counts_sha256")
    found["plain batch"] = digest(batch_counts)
    assert len(set(found.values())) == 1, f"the scenarios' final counts differ: {found}"
    results["counts_sha256"] = found["plain batch"]

    results["ratios"] = ratios(results)
    results["goals"] = GOALS
    print_tables(results, f"wordcount, {records:,} lines in {args.epochs} epochs, local[2]")
    for name, value in results["ratios"].items():
        if value is None:
            console.print(f"{name}: - (its anchor failed)")
            continue
        goal = GOALS.get(name)
        verdict = "" if goal is None else f"  (goal <= {goal}: {'met' if value <= goal else 'NOT met'})"
        console.print(f"{name}: {value:.3f}{verdict}")
    options.write(args.out, results)
    console.print(f"written to {args.out}")


if __name__ == "__main__":
    main()
