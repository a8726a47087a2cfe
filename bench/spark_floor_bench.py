"""Spark's own floor under a small epoch: what an epoch of the synthetic job's shape costs with no state at all.

    python bench/spark_floor_bench.py [--records 10000] [--keys 100000] [--repeat 15]

The synthetic job's epoch (three keyed aggregates in a chain, ``absreplay_examples.synthetic``) is one
Spark job of four stages: the records routed to the first aggregate, then three stages that each merge
their rows per key and hand them to the stores' Python task, whose changes are routed to the next. This
script builds and runs that shape with nothing of the project in it, in one local[2] session at
parallelism 2, each variant built anew every time (as an epoch is: its input differs):

  plan          the DataFrame of ``python job`` built and physically planned, not run;
  jvm job       three shuffles, each followed by a per-key aggregation, no Python: built and run;
  python job    the same with a pass-through Arrow UDF (``mapInArrow``) after each aggregation, where the
                stores' tasks are: built and run. Its time is what Spark takes for the epoch's shape
                before any state is read or written;
  epoch         the synthetic job's epoch of the same size on the local stores, caught up in one run
                (``bench/state_scale_bench.py``'s small epoch), after a load of ``--keys`` keys.

Medians of ``--repeat`` runs after three warm-up runs, the three variants taking turns. The ratios:
what a Python stage adds (per stage) against the JVM job's time per stage, and how much of our epoch,
and of the 0.5 s goal, the floor is. Prints them and writes bench/results/spark_floor.json.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.kit import options  # noqa: E402
from bench.kit.repetitions import turns  # noqa: E402
from bench.state_scale_bench import Scenario  # noqa: E402
from bench.synthetic_bench import machine  # noqa: E402

console = Console(width=120, markup=False)
STAGES = 3  # aggregates in the synthetic job's chain
TARGET_S = 0.5  # issue 29's goal for one epoch of 1e4 records


def passthrough(batches):
    yield from batches


def chain(spark, source, python: bool):
    """The epoch's shape on ``source`` (columns ``k``, ``v``): per link, a shuffle by key, a per-key sum,
    and (``python``) an Arrow UDF that returns its rows; the next link keys on a coarser key, as the synthetic
    job's aggregates do (per key, per group, per bucket)."""
    from pyspark.sql import functions as F

    df = source
    for link in range(STAGES):
        df = df.repartition(2, "k").groupBy("k").agg(F.sum("v").alias("v"))
        if python:
            df = df.mapInArrow(passthrough, df.schema)
        df = df.select((F.col("k") % (1000 // (link + 1))).alias("k"), F.col("v"))
    return df


def medians_s(actions: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Each action's median seconds over ``repeat`` runs, after three warm-up runs each; the actions take
    turns (``bench.kit.repetitions.turns``), so a drift in the machine's load falls on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in actions}
    for _, name in turns(list(actions), 3 + repeat):
        t0 = time.perf_counter()
        actions[name]()
        times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts[3:]) for name, ts in times.items()}


def small_epoch_s(spark, keys: int, records: int, epochs: int) -> float:
    """The synthetic job's median epoch of ``records`` records on its stores, after a load of ``keys`` keys."""
    root = Path(tempfile.mkdtemp(prefix="abs-floor-"))
    sc = Scenario(root, seed=keys)
    sc.land(np.arange(keys))
    sc.run(spark)
    for _ in range(3):  # warm-up epochs
        sc.land(sc.epoch_keys(keys, records, min(keys, 10_000)))
    sc.run(spark)
    for _ in range(epochs):
        sc.land(sc.epoch_keys(keys, records, min(keys, 10_000)))
    report, _ = sc.run(spark)
    sc.store.engine.dispose()
    shutil.rmtree(root, ignore_errors=True)
    return statistics.median(e.process_s for e in report.epochs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=15)
    args = options.parse(ap, "spark_floor")
    if args.quick:
        args.records, args.keys, args.repeat = 1_000, 10_000, 2

    from pyspark.sql import functions as F

    from spark_jobs.session import build_session

    spark = build_session("abs-floor", 2, "local[2]")
    try:
        keys = (F.col("id") * 7919 % args.keys).alias("k")
        source = spark.range(args.records, numPartitions=2).select(keys, F.lit(1).cast("long").alias("v"))
        source = source.localCheckpoint(eager=True)  # no file reading in the floor: the epoch's scan is apart

        def noop(df) -> None:
            df.write.format("noop").mode("overwrite").save()

        console.print(f"{args.records:,} records, {args.repeat} runs per variant")
        out = medians_s({
            "plan_s": lambda: chain(spark, source, True)._jdf.queryExecution().toRdd(),
            "jvm_job_s": lambda: noop(chain(spark, source, False)),
            "python_job_s": lambda: noop(chain(spark, source, True)),
        }, args.repeat)
        console.print(f"synthetic job, {args.keys:,} keys: small epochs of {args.records:,} records")
        out["epoch_s"] = small_epoch_s(spark, args.keys, args.records, args.repeat)
        results = {"records": args.records, "keys": args.keys, "repeat": args.repeat, "quick": args.quick,
                   "machine": machine(spark), **out}
    finally:
        spark.stop()
    results["ratios"] = {
        "python_stage_s": (out["python_job_s"] - out["jvm_job_s"]) / STAGES,
        "jvm_job_per_stage_s": out["jvm_job_s"] / (STAGES + 1),
        "floor_over_epoch": out["python_job_s"] / out["epoch_s"],
        "floor_over_target": out["python_job_s"] / TARGET_S,
    }
    for name, value in {**out, **results["ratios"]}.items():
        console.print(f"{name:>30}  {value:.3f}")
    options.write(args.out, results)
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
