"""A job of every built-in operator but the join and the loop (tests/operators/test_operators.py runs it):
events (JSON lines: key, value, event time) keyed by key into six aggregates, a process function
and a sliding window, into a SQL table and two Parquet directories under ``$OPERATORS_OUT``."""

from __future__ import annotations

from pyspark.sql import functions as F

import absreplay.api as abs

MINUTE = 60_000


def last_and_rises(state, records):
    """Per key: the newest value (by event time) and how many times a value was above the previous."""
    ordered = records.groupBy("k").agg(F.sort_array(F.collect_list(F.struct("t", "v"))).alias("seen"))
    joined = ordered.join(state, "k", "left")
    values = F.transform("seen", lambda s: s["v"])
    prev = F.concat(F.array(F.coalesce(F.col("last"), F.element_at(values, 1))), F.slice(values, 1, F.size(values) - 1))
    rises = F.aggregate(F.arrays_zip(values.alias("a"), prev.alias("b")), F.lit(0).cast("long"),
                        lambda acc, z: acc + F.when(z["a"] > z["b"], 1).otherwise(0))
    return joined.select("k", F.element_at(values, -1).cast("long").alias("last"),
                         (F.coalesce(F.col("rises"), F.lit(0)) + rises).alias("rises"))


job = abs.Job("operators", parallelism=2)
events = job.source("events", abs.json_lines({"k": str, "v": int, "t": int}, time="t"))
keyed = events.key_by("k", str)
keyed.aggregate("stats", n=abs.count(), total=abs.sum("v"), lo=abs.min("v"), hi=abs.max("v"),
                avg=abs.mean("v"), bits=abs.combine(lambda: F.col("v"), lambda c: F.bit_or(c), int)
                ).sink("stats_out", abs.SqlTable("operator_stats_out"))
keyed.process("trend", last_and_rises, state={"last": int, "rises": int}).sink(
    "trend_out", abs.ParquetDirectory("${OPERATORS_OUT}/trend"))
keyed.window("sliding", abs.Sliding(size_ms=2 * MINUTE, slide_ms=MINUTE), time="t", delay_ms=0,
             n=abs.count()).sink("sliding_out", abs.ParquetDirectory("${OPERATORS_OUT}/sliding"))
# a key of two columns: the SQL table's primary key is both, rows upsert on both
(events.map("parity", lambda df: df.withColumn("even", F.col("v") % 2 == 0))
    .key_by({"k": str, "even": bool})
    .aggregate("by_parity", n=abs.count(), total=abs.sum("v"))
    .sink("parity_out", abs.SqlTable("operator_parity_out")))
