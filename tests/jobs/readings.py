"""Sensor readings (JSON lines: sensor, value, reading) into keyed aggregates on local stores only: the
kind of job a catch-up runs several epochs of at once (tests/runs/test_catch_up_together.py).

Per sensor: count, sum, min, max and mean; per bucket (value mod 3, a stateless map before it): count and
sum; and the readings above 40 straight to a Parquet directory under ``$READINGS_OUT`` (a sink fed by no state).
"""

from __future__ import annotations

from pyspark.sql import functions as F

import absreplay.api as abs

job = abs.Job("readings", parallelism=2)
readings = job.source("readings", abs.json_lines({"sensor": str, "value": int, "reading": float}))
readings.key_by("sensor", str).aggregate(
    "per_sensor", n=abs.count(), total=abs.sum("value"), lo=abs.min("value"), hi=abs.max("reading", float),
    avg=abs.mean("reading")).sink("per_sensor_out", abs.SqlTable("readings_per_sensor"))
(readings.map("bucketed", lambda df: df.withColumn("bucket", (F.col("value") % 3).cast("long")))
 .key_by("bucket", int).aggregate("per_bucket", n=abs.count(), total=abs.sum("reading", float))
 .sink("per_bucket_out", abs.SqlTable("readings_per_bucket")))
readings.filter("high", lambda df: df.where(F.col("value") > 40)).sink(
    "high_out", abs.ParquetDirectory("${READINGS_OUT}/high"), columns={"sensor": str, "value": int})
