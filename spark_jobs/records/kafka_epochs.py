"""Read one epoch of a Kafka source (``coordinator.sources.kafka_source``) as records (partition, seq, line).

An epoch's segments are offset ranges of the source's partitions; Spark's Kafka connector reads exactly
those (``startingOffsets`` / ``endingOffsets`` per partition, ``read_committed``, so a record of an aborted
transaction is never read), and a record's sequence number is its offset. ``failOnDataLoss`` stays on: an
offset deleted by retention between the run's check and its read fails the read, and the run names it
(``kafka_source.check_before_run``). The sources' dead letters are dropped by offset.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator.catalog.models import SourceSegment
from coordinator.errors import SourceError
from coordinator.sources.kafka_source import KafkaSource, topic_partition
from spark_jobs.records.epoch_source import without_dead

CONNECTOR = ("Spark's Kafka connector is not on its class path: add org.apache.spark:spark-sql-kafka-0-10_2.13 "
             "(the version of Spark) and its dependencies to spark.jars (`make jvm-deps` fetches them: "
             ".jvm/spark.classpath)")


def offset_ranges(segments: Sequence[SourceSegment]) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (first offset, end) of ``segments``: an epoch's segments of a partition are
    consecutive (one a barrier)."""
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    for seg in segments:
        tp = topic_partition(seg.partition)
        first, end = ranges.get(tp, (seg.first_offset, seg.first_offset))
        ranges[tp] = (min(first, seg.first_offset), max(end, seg.first_offset + seg.records))
    return ranges


def read_kafka_epoch(spark: SparkSession, fmt: KafkaSource, segments: Sequence[SourceSegment],
                     dead_offsets: Sequence[tuple[str, int]] = ()) -> DataFrame | None:
    """Records (partition, seq, line) of the epoch's offset ranges ``segments`` of one Kafka source (None:
    no offsets to read)."""
    ranges = {tp: r for tp, r in offset_ranges(segments).items() if r[1] > r[0]}
    if not ranges:
        return None
    prefix = segments[0].partition.rsplit("/", 1)[0] + "/" if "/" in segments[0].partition else ""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for (topic, p), (first, end) in sorted(ranges.items()):
        assign.setdefault(topic, []).append(p)
        starting.setdefault(topic, {})[str(p)] = first
        ending.setdefault(topic, {})[str(p)] = end
    reader = spark.read.format("kafka").options(**fmt.spark_options()).options(**{
        "assign": json.dumps(assign), "startingOffsets": json.dumps(starting), "endingOffsets": json.dumps(ending),
        "kafka.isolation.level": "read_committed", "failOnDataLoss": "true", "includeHeaders": "false",
    })
    try:
        rows = reader.load()
    except AnalysisException as exc:
        if "kafka" in str(exc).lower() and "data source" in str(exc).lower():
            raise SourceError(CONNECTOR) from None
        raise
    records = rows.where(F.col("value").isNotNull()).select(
        F.concat(F.lit(prefix), F.col("topic"), F.lit("-"), F.col("partition").cast("string")).alias("partition"),
        F.col("offset").alias("seq"),
        F.col("value").cast("string").alias("line"),
    )
    return without_dead(records, dead_offsets)
