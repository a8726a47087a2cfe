"""The SparkSession of a processing run, configured for deterministic epochs."""

from __future__ import annotations

import os
import sys

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from coordinator.sources.event_time import SESSION_TIME_ZONE
from coordinator.storage import hadoop_conf
from spark_jobs import jvm_lookups, local_fs
from spark_jobs.python_path import daemon_confs


def build_session(app_name: str, parallelism: int, master: str | None = None) -> SparkSession:
    # Python workers (the local stores' tasks, users' pandas UDFs) run this interpreter, with its packages
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    # under spark-submit the master comes from its --master (the JVM that started us)
    if master or "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = master or os.environ.get("ABS_SPARK_MASTER", "local[*]")
        builder = builder.master(master)
        for key, value in daemon_confs(master).items():
            builder = builder.config(key, value)
    # the executors' Python reads the state root and the input with the driver's S3A properties: the files',
    # and under spark-submit its confs too (its JVM holds them, so connect to it first)
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        SparkContext._ensure_initialized()
    shipped = hadoop_conf.ship(dict(SparkConf().getAll()))
    if shipped is not None:
        builder = builder.config(f"spark.executorEnv.{hadoop_conf.EXECUTOR_ENV}", shipped)
    spark = configure(builder, parallelism).getOrCreate()
    local_fs.install(spark)  # no chmod process per file written (local masters)
    jvm_lookups.install(spark)  # py4j asks the JVM for a class or a static method once, not on every call
    return spark


def configure(builder: SparkSession.Builder, parallelism: int) -> SparkSession.Builder:
    return (
        # a shuffle runs as many Spark tasks as the run has subtasks; which subtask holds a key is
        # decided by key groups (spark_jobs.state.keyed_state), not by the shuffle partition it lands in
        builder.config("spark.sql.shuffle.partitions", str(parallelism))
        # and no adaptive coalescing: a run plans its shuffles the same way every time
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.enabled", os.environ.get("ABS_SPARK_UI", "false"))
        .config("spark.ui.showConsoleProgress", "false")
        # PySpark's DataFrame debugging records the Python call site of every DataFrame and Column call for
        # error messages: four py4j round trips per call, a cost every epoch pays
        .config("spark.python.sql.dataFrameDebugging.enabled", os.environ.get("ABS_SPARK_DATAFRAME_DEBUGGING", "false"))
        # every block is local in a local or small cluster run: do not wait for locality
        .config("spark.locality.wait", "0")
        .config("spark.sql.sources.partitionOverwriteMode", "static")
        .config("spark.sql.parquet.compression.codec", "snappy")
        # a timestamp without a zone (an ISO-8601 string without an offset, a Parquet timestamp without
        # one) is read in this zone, whatever the machine's: inject's plain-Python check reads it so too
        # (coordinator.sources.event_time), and a replay on another host reads the same instant
        .config("spark.sql.session.timeZone", SESSION_TIME_ZONE)
    )
