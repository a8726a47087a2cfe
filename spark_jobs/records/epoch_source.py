"""Read one epoch of a segment-file source as records (partition, seq, line).

The cut always falls on segment boundaries (a barrier covers the segments
complete when it was injected), so an epoch is a list of whole segments whose
first offsets the catalog knows. Each segment is read whole and split into
lines; a line's sequence number is the segment's first offset plus its
position. Dead-lettered offsets are dropped (lines longer than the maximum line
length among them: inject made them dead letters, ``coordinator.sources.segment_reader``).

An id envelope segment (records with explicit ids, only where the source's format
declares it: ``TextLines.envelope``) has the same offsets, one per line; its
record is the JSON object's ``line`` field. Any other segment's lines are the
records, whatever its file name. Lines that are not valid
records, and the id store's duplicates and late records, are dead letters, so
whatever is left parses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from coordinator.catalog.models import SourceSegment
from coordinator.sources.record_formats import RecordFormat
from coordinator.storage.location import Location
from spark_jobs.records.xxh64 import spark_xxhash64

RECORD_SCHEMA = StructType(
    [
        StructField("partition", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("line", StringType(), True),
    ]
)


def read_lines(spark: SparkSession, input_dir: Path | Location, segments: Sequence[SourceSegment],
               fmt: RecordFormat) -> DataFrame:
    """Just the lines (column ``line``) of a source of format ``fmt``, for operators that need no sequence
    numbers.

    The line reader splits large segments across tasks; it is used only for
    epochs without dead letters, whose records are then exactly the lines.
    """
    if not segments:
        return spark.createDataFrame([], RECORD_SCHEMA).select("line")
    text = [str(input_dir / s.partition / s.name) for s in segments if not fmt.envelope(s.name)]
    jsonl = [str(input_dir / s.partition / s.name) for s in segments if fmt.envelope(s.name)]
    parts = [spark.read.option("lineSep", "\n").text(paths) for paths in (text, jsonl) if paths]
    if text:
        parts[0] = parts[0].select(F.col("value").alias("line"))
    if jsonl:
        parts[-1] = parts[-1].select(json_line(F.col("value")).alias("line"))
    return parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])


#: a path that Spark's ``input_file_name()`` spells as ``file://`` and the path itself (nothing percent-encoded);
#: on an object store or HDFS, as its URI
PLAIN_PATH = re.compile(r"/[A-Za-z0-9_./-]*")
PLAIN_AUTHORITY = re.compile(r"[A-Za-z0-9_.:-]*")
#: the logical operators between a file scan and a row after which ``input_file_name()`` still names the file
#: the row came from: row by row, in the scan's task (no shuffle, no batch handed to a Python worker)
NARROW = frozenset({"LogicalRelation", "Project", "Filter", "Generate", "Union"})


def epoch_of_file(input_dir: Path | Location, epochs: Sequence[tuple[int, Sequence[SourceSegment]]]
                  ) -> tuple[Column, frozenset[str]] | None:
    """A column giving a record of several epochs ``(checkpoint id, segments)``, read in one scan, its epoch by
    the file it was read from, and those files (as ``input_file_name()`` names them): valid on a stream for
    which ``keeps_input_file`` holds. None when a path is one Spark would percent-encode (``PLAIN_PATH``), or
    two of them hash alike.

    One scan of a catch-up's files runs as few tasks as one epoch's scan: a union of one scan per epoch runs a
    task per segment at least, each aggregating its own few keys. The column looks the file up by the
    xxhash64 of its name: a map keyed by the names themselves compares long strings that differ only at their
    end, on every record (more than twice the cost of hashing the name)."""
    paths = {str(input_dir / s.partition / s.name): c for c, segments in epochs for s in segments}
    files = {}
    for path, c in paths.items():
        if "://" in path:
            uri, (authority, _, key) = path, path.split("://", 1)[1].partition("/")
        else:
            uri, authority, key = "file://" + path, "", path[1:]
        if not (PLAIN_PATH.fullmatch("/" + key) and PLAIN_AUTHORITY.fullmatch(authority)):
            return None
        files[uri] = c
    hashes = [spark_xxhash64(uri) for uri in files]
    if len(set(hashes)) < len(hashes):
        return None
    # SQL text, parsed once: a map of literal Columns costs a py4j call or more per file
    pairs = ", ".join(f"{h}L, {c}L" for h, c in zip(hashes, files.values(), strict=True))
    return F.expr(f"map({pairs})[xxhash64(input_file_name())]"), frozenset(files)


def keeps_input_file(df: DataFrame, files: frozenset[str]) -> bool:
    """Whether every row of ``df`` is computed row by row from a row of one of ``files``, in the task that
    scans it (``NARROW``), so that ``input_file_name()`` on it names that file. A row from anywhere else (a
    file of the user's own, rows made in the driver) would belong to no epoch."""
    todo = [df._jdf.queryExecution().optimizedPlan()]
    while todo:
        node = todo.pop()
        if node.nodeName() not in NARROW:
            return False
        if node.nodeName() == "LogicalRelation":
            try:
                scanned = set(node.relation().location().inputFiles())
            except Py4JError:  # not a file source
                return False
            if not scanned <= files:
                return False
        children = node.children()
        todo += [children.apply(i) for i in range(children.size())]
    return True


def literal_map(table: dict[str, object], value_type: str) -> Column:
    """``table`` as one map literal (string keys, ``value_type`` values), folded from JSON by the optimizer: one
    py4j call whatever its size. A lookup in it stands for a join with a small broadcast table, whose
    broadcast is a Spark job of its own in every job that reads the epoch (two or three per operator)."""
    return F.from_json(F.lit(json.dumps(table)), f"map<string, {value_type}>")


def with_segments(rows: DataFrame, segments: Sequence[SourceSegment]) -> DataFrame:
    """``rows`` (``partition``, ``segment`` columns) with their segment's ``first_offset`` and ``records``
    (null for a file not among ``segments``)."""
    table = {f"{s.partition}/{s.name}": {"first_offset": s.first_offset, "records": s.records} for s in segments}
    found = F.try_element_at(literal_map(table, "struct<first_offset: bigint, records: bigint>"),
                             F.concat_ws("/", "partition", "segment"))
    return rows.withColumns({"first_offset": found["first_offset"], "records": found["records"]})


def without_dead(records: DataFrame, dead_offsets: Sequence[tuple[str, int]]) -> DataFrame:
    """``records`` (``partition``, ``seq``) but the dead letters ``dead_offsets``."""
    if not dead_offsets:
        return records
    dead: dict[str, list[int]] = {}
    for partition, seq in dead_offsets:
        dead.setdefault(partition, []).append(seq)
    is_dead = F.array_contains(F.try_element_at(literal_map(dead, "array<bigint>"), F.col("partition")), F.col("seq"))
    return records.where(~F.coalesce(is_dead, F.lit(False)))


def json_line(value: Column) -> Column:
    """The ``line`` field of an id envelope (validated at inject, so it is a JSON string)."""
    return F.get_json_object(value, "$.line")


def read_epoch(
    spark: SparkSession,
    input_dir: Path | Location,
    segments: Sequence[SourceSegment],
    fmt: RecordFormat,
    dead_offsets: Sequence[tuple[str, int]] = (),
) -> DataFrame:
    """Records (partition, seq, line) of the epoch of a source of format ``fmt``, dead letters dropped."""
    if not segments:
        return spark.createDataFrame([], RECORD_SCHEMA)
    paths = [str(input_dir / s.partition / s.name) for s in segments]
    # a partition is one directory, or two (<source>/<partition>) for a job with several sources
    depth = 1 + segments[0].partition.count("/")
    parts = F.split(F.col("_metadata.file_path"), "/")
    raw = spark.read.text(paths, wholetext=True).select(
        F.array_join(F.slice(parts, -(depth + 1), depth), "/").alias("partition"),
        F.element_at(parts, -1).alias("segment"),
        F.col("value"),
    )
    lines = with_segments(raw, segments).select(
        "partition",
        "segment",
        "first_offset",
        "records",
        F.posexplode(F.split(F.col("value"), "\n", -1)).alias("pos", "line"),
    )
    records = lines.where(F.col("pos") < F.col("records")).select(
        "partition", (F.col("first_offset") + F.col("pos")).alias("seq"), "line", "segment"
    )
    records = without_dead(records, dead_offsets)
    envelopes = sorted({s.name for s in segments if fmt.envelope(s.name)})
    if envelopes:
        jsonl = F.col("segment").isin(envelopes)
        records = records.withColumn("line", F.when(jsonl, json_line(F.col("line"))).otherwise(F.col("line")))
    return records.select("partition", "seq", "line")


def read_parquet_epoch(
    spark: SparkSession,
    input_dir: Path | Location,
    segments: Sequence[SourceSegment],
    columns: Sequence[str],
    dead_offsets: Sequence[tuple[str, int]] = (),
) -> DataFrame | None:
    """Records (partition, seq, declared columns...) of an epoch of Parquet segments (None: no segment): a row's sequence
    number is its segment's first offset plus its row index in the file (``_metadata.row_index``)."""
    if not segments:
        return None
    depth = 1 + segments[0].partition.count("/")
    paths = [str(input_dir / s.partition / s.name) for s in segments]
    parts = F.split(F.col("_metadata.file_path"), "/")
    rows = spark.read.parquet(*paths).select(
        F.array_join(F.slice(parts, -(depth + 1), depth), "/").alias("partition"),
        F.element_at(parts, -1).alias("segment"),
        F.col("_metadata.row_index").alias("row"),
        *[F.col(c) for c in columns],
    )
    records = with_segments(rows, segments).where(F.col("first_offset").isNotNull()).select(
        "partition", (F.col("first_offset") + F.col("row")).alias("seq"), *columns)
    return without_dead(records, dead_offsets)
