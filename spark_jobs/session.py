"""The SparkSession of a processing run, configured for deterministic epochs."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession


def build_session(app_name: str, parallelism: int, master: str | None = None) -> SparkSession:
    builder = SparkSession.builder.appName(app_name)
    if master or not os.environ.get("SPARK_ENV_LOADED") and "spark.master" not in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        builder = builder.master(master or os.environ.get("ABS_SPARK_MASTER", "local[*]"))
    return configure(builder, parallelism).getOrCreate()


def configure(builder: SparkSession.Builder, parallelism: int) -> SparkSession.Builder:
    return (
        builder.config("spark.sql.shuffle.partitions", str(parallelism))
        # one shuffle partition per keyed subtask: adaptive coalescing would break the mapping
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.enabled", os.environ.get("ABS_SPARK_UI", "false"))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.sources.partitionOverwriteMode", "static")
        .config("spark.sql.parquet.compression.codec", "snappy")
    )
