"""Read one epoch of a Delta source (``coordinator.sources.delta_source``) as records (partition, seq,
declared columns...).

An epoch's segments are table versions; it reads exactly the Parquet files those versions added, with
Spark's Parquet reader and the declared columns as its schema. A row's sequence number is its file's
first offset (its version's first offset plus the rows of the version's earlier files) plus its row
index in the file (``_metadata.row_index``), as for a Parquet segment file
(``epoch_source.read_parquet_epoch``); the sources' dead letters are dropped by offset.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator.catalog.models import SourceSegment
from coordinator.sources.delta_source import DeltaSource, EpochFile, epoch_files
from spark_jobs.records.epoch_source import literal_map, without_dead
from spark_jobs.records.spark_types import spark_schema


def _scans(files: Sequence[EpochFile]) -> list[list[EpochFile]]:
    """The files in as few scans as there can be with no file name twice in a scan (a row finds its file
    by its name: Delta's file names are unique, but the protocol does not say so)."""
    scans: list[list[EpochFile]] = []
    for file in files:
        scan = next((sc for sc in scans if all(f.name != file.name for f in sc)), None)
        if scan is None:
            scans.append(scan := [])
        scan.append(file)
    return scans


def read_delta_epoch(
    spark: SparkSession,
    fmt: DeltaSource,
    segments: Sequence[SourceSegment],
    dead_offsets: Sequence[tuple[str, int]] = (),
) -> DataFrame | None:
    """Records (partition, seq, declared columns...) of the epoch's versions ``segments`` of one Delta
    source (None: no file to read)."""
    files = epoch_files(fmt, segments)
    if not files:
        return None
    partition = segments[0].partition
    columns = [c for c, _ in fmt.fields]
    parts = []
    for scan in _scans(files):
        first = literal_map({f.name: f.first_offset for f in scan}, "bigint")
        rows = spark.read.schema(spark_schema(fmt.fields, nullable=True)).parquet(*[f.path for f in scan]).select(
            F.col("_metadata.file_name").alias("file"), F.col("_metadata.row_index").alias("row"), *columns)
        offset = F.try_element_at(first, F.col("file"))
        parts.append(rows.where(offset.isNotNull()).select(
            F.lit(partition).alias("partition"), (offset + F.col("row")).alias("seq"), *columns))
    records = parts[0]
    for part in parts[1:]:
        records = records.unionByName(part)
    return without_dead(records, dead_offsets)
