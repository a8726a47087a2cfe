"""Keyed operator state as Parquet: write a snapshot, restore a checkpoint, check integrity.

State is a DataFrame of (key, values..., updated) where ``updated`` is the
checkpoint id of the epoch that last changed the row. A full snapshot writes
every row; an incremental one writes the rows changed since its base
checkpoint. Restoring follows the chain of bases back to a full snapshot and
keeps, per key, the row with the highest ``updated``; a key whose newest row is
a tombstone (``coordinator.sinks.deletes``) is dropped.

Rows are assigned to subtasks by key groups (Flink's KeyGroupRangeAssignment):
a key's group is pmod(hash(key), max_parallelism), fixed for the job's life,
and subtask i of p holds the contiguous groups g with g * p // max_parallelism
= i. The subtask is a column computed from the key wherever it matters
(snapshot files, back-edge logs, partial recovery, verify), never a Spark
partition: Spark's shuffles hash keys onto their own partitions, and a
restore at another parallelism reads every old subtask's files and assigns
each key by the new rule.

A subtask's checksum is the XOR of xxhash64 over its rows, so it depends on
content only, not on file names or row order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StructField, StructType

from coordinator.checkpoints.state_chain import ChainLink
from coordinator.errors import StateIntegrityError
from coordinator.sinks.deletes import DELETE

SUBTASK = "subtask"


@dataclass(frozen=True)
class SubtaskStats:
    rows: int
    checksum: str


def quoted(name: str) -> str:
    """A column name quoted for SQL text."""
    return "`" + name.replace("`", "``") + "`"


def subtask_of(key: str | Sequence[str], parallelism: int, max_parallelism: int) -> F.Column:
    """The subtask (0..parallelism-1) holding each row's key (one column or several): the range of
    key groups it owns. SQL text, parsed at once: built from Column objects it was ten py4j calls."""
    keys = ", ".join(quoted(k) for k in ([key] if isinstance(key, str) else key))
    # exact: a double division of integers below 2^53 never rounds up across an integer
    return F.expr(f"CAST(floor(CAST(pmod(hash({keys}), {max_parallelism}) AS BIGINT) * {parallelism} "
                  f"/ {max_parallelism}) AS INT)")


def with_subtask(df: DataFrame, key: str | Sequence[str], parallelism: int, max_parallelism: int) -> DataFrame:
    return df.withColumn(SUBTASK, subtask_of(key, parallelism, max_parallelism))


def format_checksum(value: int | None) -> str | None:
    return None if value is None else f"{value & 0xFFFFFFFFFFFFFFFF:016x}"


def group_metrics(columns: Sequence[str], group: str, groups: int) -> list[F.Column]:
    """Aggregates for ``DataFrame.observe``: rows and checksum of each value 0..groups-1 of
    column ``group`` (a subtask, a restore link), computed in the pass that writes or reads.
    SQL text, one py4j call each (built from Column objects: a dozen per group, each epoch)."""
    row_hash = f"xxhash64({', '.join(quoted(c) for c in columns)})"
    g = quoted(group)
    return [F.expr(metric) for i in range(groups) for metric in (
        f"sum(CASE WHEN {g} = {i} THEN 1 ELSE 0 END) AS rows_{i}",
        f"bit_xor(CASE WHEN {g} = {i} THEN {row_hash} END) AS xor_{i}")]


def snapshot_metrics(columns: Sequence[str], parallelism: int, base: int | None) -> list[F.Column]:
    """What the pass writing a snapshot observes: rows and checksum per subtask (``group_metrics``), and
    ``changed``, its rows changed after checkpoint ``base`` (all of them when None)."""
    changed = F.lit(True) if base is None else F.col("updated") > F.lit(base)
    return [*group_metrics(columns, SUBTASK, parallelism), F.sum(F.when(changed, 1).otherwise(0)).alias("changed")]


def metrics_by(df: DataFrame, columns: Sequence[str], by: Sequence[str]) -> dict[tuple, tuple[int, int]]:
    """Rows and checksum (those of ``group_metrics``) of each group of columns ``by`` that ``df`` holds, in one
    aggregation job: each row is hashed once, where ``observe`` with ``group_metrics`` evaluates a pair of
    conditional aggregates per group on every row (0.6 s over 500,000 rows in 20 groups)."""
    found = df.groupBy(*by).agg(F.count(F.lit(1)).alias("_rows"),
                                F.bit_xor(F.xxhash64(*[F.col(c) for c in columns])).alias("_xor")).collect()
    return {tuple(r[c] for c in by): (r["_rows"], r["_xor"]) for r in found}


def stats_from_metrics(metrics: dict, groups: int) -> dict[int, SubtaskStats]:
    return {
        i: SubtaskStats(int(metrics.get(f"rows_{i}") or 0), format_checksum(metrics.get(f"xor_{i}")) or "")
        for i in range(groups)
    }


def write_snapshot(df: DataFrame, operator_uri: str, only_written_subtasks: bool = False) -> None:
    """Write rows (with a subtask column) as <operator_uri>/subtask=<i>/part-*.parquet.

    ``only_written_subtasks``: replace only the subtask directories written now and keep the
    others (a partial recovery keeps the files of the subtasks that had acked)."""
    writer = df.write.mode("overwrite").partitionBy(SUBTASK)
    if only_written_subtasks:
        writer = writer.option("partitionOverwriteMode", "dynamic")
    writer.parquet(operator_uri)


def bytes_under(spark: SparkSession, uri: str) -> int:
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(path):
        return 0
    return int(fs.getContentSummary(path).getLength())


def restore(
    spark: SparkSession,
    schema: StructType,
    key: str | Sequence[str],
    links: Sequence[ChainLink],
    parallelism: int,
    identity: Sequence[str] | None = None,
) -> DataFrame:
    """The operator's state at a checkpoint from its chain of snapshot files, checked and
    materialized in one pass: every link's rows and checksum are observed while the state
    is built, and compared with what its ack recorded. ``identity``: a row's identity (default:
    the key), the newest version of which an incremental chain keeps."""
    keys = [key] if isinstance(key, str) else list(key)
    identity = list(identity or keys)
    stored = [link for link in links if link.rows > 0]
    if not stored:
        return spark.createDataFrame([], schema)
    names = schema.fieldNames()
    # a state without deletes of its own (a window, a join) has tombstones in its deltas only: rows that
    # left the state since the base (``spark_jobs.state.frames.state_diff``); read where there are none as null
    marked = schema if DELETE in names else StructType([*schema.fields, StructField(DELETE, BooleanType())])
    data, observation = read_observed(
        spark, marked, [(link.uri, f"state file {link.uri} of checkpoint {link.checkpoint_id}") for link in stored],
        "restore", hashed=names,
    )
    if len({link.checkpoint_id for link in stored}) == 1:
        state = data.drop("_link").repartition(parallelism, *keys)
    else:
        # an incremental chain: the newest version of every row wins, the one of the newest link (one
        # max_by per column keeps the aggregation buffer fixed-width, so Spark hashes instead of sorting)
        data = data.withColumn("_at", F.array(*[F.lit(link.checkpoint_id) for link in stored])[F.col("_link")])
        values = [c for c in marked.fieldNames() if c not in identity]
        state = data.groupBy(*identity).agg(*[F.max_by(c, "_at").alias(c) for c in values]).select(
            *marked.fieldNames())
    # a row whose newest version is a tombstone left the state
    state = state.where(F.col(DELETE).isNull() | ~F.col(DELETE))
    if DELETE not in names:
        state = state.drop(DELETE)
    try:
        state = state.localCheckpoint(eager=True)
    except Exception as exc:  # noqa: BLE001 - a corrupt Parquet file surfaces here
        uris = ", ".join(f"{link.uri} (checkpoint {link.checkpoint_id})" for link in stored)
        raise StateIntegrityError(f"cannot read state files {uris}: {str(exc).splitlines()[0]}") from None
    verify_links(observation.get, stored)
    return state


def read_observed(spark: SparkSession, schema: StructType, files: Sequence[tuple[str, str]],
                  name: str, hashed: Sequence[str] | None = None) -> tuple[DataFrame, Observation]:
    """Stored files (uri, what to call it in an error) read as one DataFrame with a ``_link``
    column (the file's index), observed for rows and checksum per file as it is read (the checksum
    over the columns ``hashed``, default all)."""
    parts = []
    for i, (uri, what) in enumerate(files):
        try:
            parts.append(spark.read.schema(schema).parquet(uri).withColumn("_link", F.lit(i)))
        except Exception as exc:  # noqa: BLE001 - Spark raises several kinds for a missing path
            raise StateIntegrityError(f"{what} is missing or unreadable: {str(exc).splitlines()[0]}") from None
    data = parts[0]
    for part in parts[1:]:
        data = data.unionByName(part)
    observation = Observation(name)
    columns = list(hashed or schema.fieldNames())
    return data.observe(observation, *group_metrics(columns, "_link", len(files))), observation


def verify_links(metrics: dict, links: Sequence[ChainLink]) -> None:
    found = stats_from_metrics(metrics, len(links))
    for i, link in enumerate(links):
        rows, checksum = found[i].rows, found[i].checksum or None
        if rows != link.rows or (link.checksum and checksum != link.checksum):
            raise StateIntegrityError(
                f"state file {link.uri} of checkpoint {link.checkpoint_id} is corrupt: "
                f"{rows} rows with checksum {checksum}, catalog says {link.rows} rows with {link.checksum}"
            )
