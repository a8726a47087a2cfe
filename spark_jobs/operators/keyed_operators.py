"""The built-in keyed operators, one epoch each: state n-1 and the epoch's records -> state n, output.

Every new or changed state row carries ``updated = n``. All of them are
DataFrame operations (joins, unions, aggregations), never per-record Python.

- aggregate: union the state with each record's contributions, aggregate per key.
- process: the user's function over the touched keys' state rows and the records.
- window: each record is assigned the windows containing its event time; those
  already emitted (their end plus the allowed lateness is at or before the
  watermark of the epoch before) do not take it, and a record with no window
  left is a dead letter. The watermark then moves to the largest event time so
  far minus the delay, and every window it passes is emitted once and leaves
  the state (a re-firing window: ``spark_jobs.operators.refire``).
- join: the other side's latest row per key (highest source offset) is kept; a
  record of this side is emitted with it, or waits in the state until it comes.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from coordinator.dataflow.compile import WINDOW_EMITTED, emitted, hidden
from coordinator.sinks.deletes import DELETE
from spark_jobs.operators import deletes, refire
from spark_jobs.records.event_time import event_ms
from spark_jobs.records.spark_types import spark_type
from spark_jobs.state import aggregate_parts

LATE_COLUMNS = ("partition", "offset", "reason", "payload")


class Folding:
    """How a keyed operator's aggregates fold records into its state: each record's contributions (key
    columns, ``extra``, one column per aggregate part, ``updated``), the merge per group, and the means
    computed from their hidden sum and count after it."""

    def __init__(self, node: Any, extra: list[Column], checkpoint_id: int) -> None:
        self.contributions: list[Column] = [F.col(k).cast(spark_type(t)).alias(k) for k, t in node.key] + extra
        self.merges: list[Column] = []
        self.means: list[str] = []
        for name, agg in node.aggregates.items():
            for column, value, merge in aggregate_parts.parts(name, agg):
                self.contributions.append(value.alias(column))
                self.merges.append(merge(F.col(column)).alias(column))
            if agg.kind == "mean":
                self.means.append(name)
        self.contributions.append(F.lit(checkpoint_id).cast("long").alias("updated"))

    def with_means(self, merged: DataFrame) -> DataFrame:
        for name in self.means:
            merged = merged.withColumn(name, F.col(hidden(name, "sum")) / F.col(hidden(name, "count")))
        return merged


def _fold(state: DataFrame, rows: DataFrame, node: Any, group: list[str], extra: list[Column],
          columns: list[str], checkpoint_id: int, kept: tuple[str, ...] = ()) -> DataFrame:
    """Union the state with the rows' contributions and aggregate per ``group``: one shuffle. ``kept``:
    state columns the records do not touch (null in their contributions), merged by max."""
    folding = Folding(node, [*extra, *(F.lit(None).cast("long").alias(c) for c in kept)], checkpoint_id)
    merged = state.unionByName(rows.select(*folding.contributions)).groupBy(*group).agg(
        *folding.merges, *(F.max(c).alias(c) for c in kept), F.max("updated").alias("updated"))
    return folding.with_means(merged).select(*columns)


#: logical operators that read their one input row by row: a few of them over a local checkpoint are as
#: immutable as the checkpoint, and as cheap to read again as a copy of their own would be
NARROW = frozenset({"Project", "Filter", "SubqueryAlias"})
NARROW_DEPTH = 8  # beyond this many a chain is copied anyway: a state's lineage stays bounded


def over_checkpoint(df: DataFrame) -> bool:
    """Whether ``df`` is at most ``NARROW_DEPTH`` deterministic projections and filters of one local
    checkpoint (a window's state after the watermark, an aggregate's changed rows): then it needs no
    copy of its own. Read from the analyzed plan, which Spark has already (a few py4j calls, no job)."""
    plan = df._jdf.queryExecution().analyzed()
    if not plan.deterministic():
        return False
    for _ in range(NARROW_DEPTH + 1):
        kind = plan.getClass().getSimpleName()
        if kind == "LogicalRDD":  # a local checkpoint, or no rows at all (``no_rows``)
            return plan.rdd().isCheckpointed() or plan.rdd().getNumPartitions() == 0
        if kind not in NARROW:
            return False
        plan = plan.child()
    return False


def no_rows(like: DataFrame) -> DataFrame:
    """An empty DataFrame of ``like``'s schema that no Spark job reads (``over_checkpoint``)."""
    spark = like.sparkSession
    return spark.createDataFrame(spark.sparkContext.emptyRDD(), like.schema)


class LateCount:
    """How many of an epoch's records are late, counted in the pass that folds the epoch (an ``Observation``: no
    Spark job of its own), so that an epoch without any hands its dead letters no rows (``no_rows``) instead of a
    job that reads and judges its records again to find none. Windows, session windows and interval joins."""

    def __init__(self) -> None:
        self._seen = Observation()

    def counting(self, df: DataFrame, is_late: Column, dry: bool) -> DataFrame:
        """``df``, counting its rows that ``is_late`` in the pass that reads it (as planned when ``dry``)."""
        return df if dry else df.observe(self._seen, F.count(F.when(is_late, 1)).alias("late"))

    @property
    def late(self) -> int:
        """How many were late (once that pass ran)."""
        return int(self._seen.get["late"] or 0)

    def rows(self, late: DataFrame) -> DataFrame:
        """``late``, or no rows when the pass counted none."""
        return late if self.late else no_rows(late)


def materialized(df: DataFrame, dry: bool) -> DataFrame:
    """``df`` as an immutable local copy (one Spark job; none when it is one already: ``over_checkpoint``),
    or as planned when ``dry`` (a dry run: schemas only)."""
    return df if dry or over_checkpoint(df) else df.localCheckpoint(eager=True)


def aggregate(state: DataFrame, rows: DataFrame, node: Any, columns: list[str], checkpoint_id: int) -> DataFrame:
    return _fold(state, rows, node, list(node.key_names), [], columns, checkpoint_id)


def process(state: DataFrame, rows: DataFrame, node: Any, columns: list[str], checkpoint_id: int,
            dry: bool = False, durable: int | None = None) -> DataFrame:
    """``dry``: plan only (the schema of a dry run), no Spark job. The function's rows with ``_delete``
    true delete their keys: a live key becomes a tombstone (``spark_jobs.operators.deletes``; one for a
    key the state does not hold is dropped); ``durable``: the newest checkpoint whose snapshot is durable
    (older tombstones leave the state)."""
    keys = list(node.key_names)
    state = deletes.purged(state, durable)
    touched = rows.select(*keys).distinct()
    current = deletes.live(state).join(touched, keys, "left_semi").drop("updated", DELETE)
    values = [c for c in columns if c not in (*keys, "updated", DELETE)]
    out = node.fn(current, rows)
    gone = F.coalesce(F.col(DELETE).cast("boolean"), F.lit(False)) if DELETE in out.columns else F.lit(False)
    fresh = out.select(
        *[F.col(k).cast(spark_type(t)).alias(k) for k, t in node.key],
        *[F.when(~gone, F.col(c)).alias(c) for c in values], deletes.marker(gone),
        F.lit(checkpoint_id).cast("long").alias("updated"),
    )
    if DELETE in out.columns:  # a delete of a key the state does not hold deletes nothing: no tombstone
        held = current.select(*keys, F.lit(True).alias("_held"))
        fresh = fresh.join(held, keys, "left").where(~deletes.is_tombstone() | F.col("_held").isNotNull())
    # state n: what the function wrote, and the state's rows of every other key. One full outer join reads the
    # function's rows once, so they are computed once, in the Spark job that materializes state n
    wrote = fresh.select(*columns, F.lit(True).alias("_wrote"))
    prior = state.select(*keys, *[F.col(c).alias(f"_prior_{c}") for c in columns if c not in keys])
    merged = prior.join(wrote, keys, "full_outer")
    return merged.select(*[F.col(c) if c in keys else F.when(F.col("_wrote"), F.col(c)).otherwise(
        F.col(f"_prior_{c}")).alias(c) for c in columns])


def window(state: DataFrame, rows: DataFrame, node: Any, columns: list[str], mark: int | None,
           checkpoint_id: int, dry: bool) -> tuple[DataFrame, DataFrame, DataFrame, int | None]:
    """(state n, the windows emitted, the late records as dead letters, the watermark after the epoch)."""
    size, slide, lateness = node.window.size_ms, node.window.slide_ms, node.lateness_ms
    t = event_ms(rows, node.time)
    last = F.floor(t / slide).cast("long") * slide  # the latest window holding t starts here
    first = (F.floor((t - size) / slide).cast("long") + 1) * slide
    # the newest event time, and how many records are late, are observed in the pass that folds the epoch
    seen, counted = Observation(), LateCount()
    is_late = (last + size + lateness <= F.lit(mark)) if mark is not None else F.lit(False)
    observed = counted.counting(rows if dry else rows.observe(seen, F.max(t).alias("newest")), is_late, dry)
    assigned = observed.withColumn("window_start", F.explode(F.sequence(first, last, F.lit(slide).cast("long"))))
    if mark is not None:
        assigned = assigned.where(F.col("window_start") + size + lateness > mark)
    contributions = [F.col("window_start"), (F.col("window_start") + size).alias("window_end")]
    merged = _fold(state, assigned, node, [*node.key_names, "window_start", "window_end"], contributions,
                   columns, checkpoint_id, (WINDOW_EMITTED,) if node.refire else ())
    if dry:
        empty = rows.limit(0)
        return merged, merged.select(*emitted(columns)), _late(empty, node, F.lit(0), mark), mark
    merged = merged.localCheckpoint(eager=True)
    before = mark
    newest = seen.get["newest"]
    if newest is not None:
        mark = max(mark, newest - node.delay_ms) if mark is not None else newest - node.delay_ms
    late = _late(counted.rows(rows.where(is_late)), node, last + size, before)
    if node.refire:
        kept, windows = refire.fire(merged, mark, lateness, checkpoint_id)
        return kept, windows.select(*emitted(columns)), late, mark
    fired = (F.col("window_end") + lateness <= F.lit(mark)) if mark is not None else F.lit(False)
    windows = merged.where(fired).select(*emitted(columns))
    return merged.where(~fired), windows, late, mark


def _late(late: DataFrame, node: Any, ends: Column, mark: int | None) -> DataFrame:
    has = set(late.columns)
    payload = F.to_json(F.struct(*[F.col(c) for c in late.columns if not c.startswith("_")]))
    reason = F.format_string(
        f"late for {node.name}: event time %d is in window(s) ending by %d, all emitted already: the watermark "
        f"was {mark} (delay {node.delay_ms} ms, allowed lateness {node.lateness_ms} ms)",
        event_ms(late, node.time), ends)
    return late.select(
        (F.col("_partition") if "_partition" in has else F.lit(node.name)).alias("partition"),
        (F.col("_seq") if "_seq" in has else F.lit(-1).cast("long")).alias("offset"),
        reason.alias("reason"), payload.alias("payload"),
    )


def join(state: DataFrame | None, left: DataFrame, right: DataFrame, node: Any,
         checkpoint_id: int, dry: bool = False) -> tuple[DataFrame, DataFrame]:
    """(state n, the matched rows); ``dry``: plan only (the schema of a dry run), no Spark job."""
    keys = list(node.key_names)
    right = right.select(*[F.col(r).alias(k) for (r, _), k in zip(node.other_key, keys, strict=True)],
                         *[c for c in right.columns if c not in {r for r, _ in node.other_key}])
    if "_seq" not in left.columns:
        left = left.withColumn("_seq", F.xxhash64(*left.columns))
    if "_partition" not in left.columns:
        left = left.withColumn("_partition", F.lit(""))
    order = [c for c in ("_seq", "_partition") if c in right.columns]
    right = right.drop(*[c for c in ("_seq", "_partition") if c not in order])
    position = {"_partition", "_seq"}
    left_values = [c for c in left.columns if c not in (*keys, *position)]
    renamed = {c: (f"{c}_right" if c in left_values else c) for c in right.columns if c not in (*keys, *position)}
    right_values = list(renamed.values())
    types = {**{c: t for c, t in left.dtypes}, **{renamed[c]: t for c, t in right.dtypes if c in renamed}}

    def as_state(df: DataFrame, side: str, updated: Column) -> DataFrame:
        """Rows of one side as state rows; ``_n`` numbers a left record's rows of one key (an upstream
        flat_map may make several): (key, side, _partition, _seq, _n) identifies a row."""
        have = set(df.columns)
        n = F.lit(1) if side == "R" else F.row_number().over(Window.partitionBy(*keys, "_partition", "_seq").orderBy(
            F.xxhash64(*[F.col(c) for c in left_values] or [F.lit(0)])))
        return df.select(*keys, F.lit(side).alias("_side"),
                         (F.col("_partition") if "_partition" in have else F.lit("")).alias("_partition"),
                         (F.col("_seq") if "_seq" in have else F.lit(0).cast("long")).alias("_seq"),
                         n.cast("int").alias("_n"),
                         *[(F.col(c) if c in have else F.lit(None).cast(types[c])).alias(c)
                           for c in (*left_values, *right_values)],
                         updated.alias("updated"))

    stamp = F.lit(checkpoint_id).cast("long")
    newest = right.select(*keys, *[F.col(c).alias(n) for c, n in renamed.items()],
                          F.struct(*[F.col(c) for c in order] or [F.lit(0)]).alias("_order"))
    latest = newest.groupBy(*keys).agg(F.max_by(F.struct(*right_values), "_order").alias("r")).select(
        *keys, "r.*")
    if state is None:
        state = as_state(left.limit(0), "L", stamp)
    prev_right, prev_left = state.where(F.col("_side") == "R"), state.where(F.col("_side") == "L")
    fresh_right = as_state(latest, "R", stamp)
    right_all = prev_right.join(latest.select(*keys), keys, "left_anti").unionByName(fresh_right)
    left_all = prev_left.unionByName(as_state(left, "L", stamp))
    table = right_all.select(*keys, *right_values)
    table = materialized(table, dry)
    matched = left_all.select(*keys, *left_values, "_partition", "_seq", "updated").join(table, keys, "inner")
    if node.reemit:  # every record stays; those of a key whose row changed are emitted again with it
        changed = latest.select(*keys).withColumn("_changed", F.lit(True))
        again = matched.join(changed, keys, "left").where(F.col("_changed") | (F.col("updated") == stamp))
        return right_all.unionByName(left_all), again.drop("_changed", "updated")
    waiting = left_all.join(table.select(*keys), keys, "left_anti")
    return right_all.unionByName(waiting), matched.drop("updated")


def rejoined(state: DataFrame, node: Any, columns: tuple[str, ...]) -> DataFrame:
    """A re-emitting join's output as of its state (every record joined with its key's row then): what
    its sinks held at that checkpoint, ``updated`` the later of the two sides'. A state row holds its
    side's columns and nulls for the other side's."""
    keys = list(node.key_names)
    left, right = state.where(F.col("_side") == "L").alias("l"), state.where(F.col("_side") == "R").alias("r")
    rows = left.join(right, keys, "inner")
    values = [F.coalesce(F.col(f"l.{c}"), F.col(f"r.{c}")).alias(c) for c in columns if c not in keys]
    return rows.select(*keys, *values, F.greatest("l.updated", "r.updated").alias("updated")).select(
        *columns, "updated")
