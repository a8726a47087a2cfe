"""Read one epoch of a segment-file source as records (partition, seq, line).

The cut always falls on segment boundaries (a barrier covers the segments
complete when it was injected), so an epoch is a list of whole segments whose
first offsets the catalog knows. Each segment is read whole and split into
lines; a line's sequence number is the segment's first offset plus its
position. Dead-lettered offsets are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from coordinator.catalog.models import SourceSegment

SEGMENTS_SCHEMA = StructType(
    [
        StructField("partition", StringType(), False),
        StructField("segment", StringType(), False),
        StructField("first_offset", LongType(), False),
        StructField("records", LongType(), False),
    ]
)
RECORD_SCHEMA = StructType(
    [
        StructField("partition", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("line", StringType(), True),
    ]
)


def read_lines(spark: SparkSession, input_dir: Path, segments: Sequence[SourceSegment]) -> DataFrame:
    """Just the lines (column ``line``), for operators that need no sequence numbers.

    The line reader splits large segments across tasks; it is used only for
    epochs without dead letters, whose records are then exactly the lines.
    """
    if not segments:
        return spark.createDataFrame([], RECORD_SCHEMA).select("line")
    paths = [str(input_dir / s.partition / s.name) for s in segments]
    return spark.read.option("lineSep", "\n").text(paths).select(F.col("value").alias("line"))


def read_epoch(
    spark: SparkSession,
    input_dir: Path,
    segments: Sequence[SourceSegment],
    dead_offsets: Sequence[tuple[str, int]] = (),
) -> DataFrame:
    """Records (partition, seq, line) of the epoch, dead letters dropped."""
    if not segments:
        return spark.createDataFrame([], RECORD_SCHEMA)
    paths = [str(input_dir / s.partition / s.name) for s in segments]
    meta = spark.createDataFrame(
        [(s.partition, s.name, s.first_offset, s.records) for s in segments], SEGMENTS_SCHEMA
    )
    raw = spark.read.text(paths, wholetext=True).select(
        F.element_at(F.split(F.col("_metadata.file_path"), "/"), -2).alias("partition"),
        F.element_at(F.split(F.col("_metadata.file_path"), "/"), -1).alias("segment"),
        F.col("value"),
    )
    lines = raw.join(F.broadcast(meta), ["partition", "segment"]).select(
        "partition",
        "first_offset",
        "records",
        F.posexplode(F.split(F.col("value"), "\n", -1)).alias("pos", "line"),
    )
    records = lines.where(F.col("pos") < F.col("records")).select(
        "partition", (F.col("first_offset") + F.col("pos")).alias("seq"), "line"
    )
    if dead_offsets:
        dead = spark.createDataFrame(list(dead_offsets), "partition string, seq long")
        records = records.join(F.broadcast(dead), ["partition", "seq"], "left_anti")
    return records
