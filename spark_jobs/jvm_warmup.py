"""The Spark application whose loaded classes make an archive of Spark's classes ahead of the runs
(``absreplay.commands.jvm_archive.make``: the Airflow demo's, the tests'): what the project's runs do, in
small: a session, shuffles and aggregates, a join, Parquet written and read (through spark_jobs.local_fs's
file system, as every run), an Arrow UDF (a Python worker), a local checkpoint and a collect."""

import sys
import tempfile

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_jobs import local_fs


def double(batches):
    for batch in batches:
        yield pa.record_batch([pc.multiply(batch.column(0), 2)], names=["k"])


def main() -> None:
    spark = SparkSession.builder.config("spark.sql.shuffle.partitions", "2").getOrCreate()
    local_fs.install(spark)
    words = spark.range(10_000).select((F.col("id") % 97).alias("k"), F.lit("w").alias("w"))
    counts = words.groupBy("k").agg(F.count("*").alias("n"), F.sum("k").alias("s")).localCheckpoint(eager=True)
    joined = counts.join(words.select("k").distinct(), "k").repartitionById(2, F.col("k").cast("int"))
    with tempfile.TemporaryDirectory() as d:
        joined.write.mode("overwrite").parquet(f"{d}/p")
        back = spark.read.parquet(f"{d}/p").mapInArrow(double, "k long")
        rows = back.orderBy("k").collect()
    spark.stop()
    sys.exit(0 if len(rows) == 97 else 1)


if __name__ == "__main__":
    main()
