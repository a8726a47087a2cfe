"""Session windows (``abs.Session(gap_ms=g)``), one epoch: state n-1 and the epoch's records -> state n,
the sessions emitted, the late records as dead letters, the watermark after the epoch.

What a session is, per key (L: ``allowed_lateness_ms``; W: the watermark before the epoch, W': after it):

- A record of event time t spans [t, t + g). Spans that overlap are one session, so a session is
  [its first event time, its last event time + g): ``window_start`` and ``window_end``. Spans are
  half-open: a record g or more after the last one starts a new session; one that overlaps two
  sessions bridges them, and they become one (their aggregates merged).
- A record is late (a dead letter with its reason) when W is set and either t + g + L <= W (a session
  of its own would have been emitted already) or t < the end of a session of its key emitted already
  (it would belong to that session, or reopen the time it covered).
- W' = max(W, newest event time of the epoch - ``delay_ms``): every record of the epoch counts, the
  late ones too, as for tumbling windows.
- A session is emitted once, in the first epoch whose W' >= window_end + L, i.e. when the watermark
  passes its last event time plus the gap plus the allowed lateness. It then stays in the state,
  flagged ``session__emitted`` (so that records before its end are found late), until
  W' >= window_end + g + L: from there on every such record is late by the first rule anyway.

So the sessions a key emits are those of its accepted records, merged as if all had come at once:
records accepted later never fall before the end of an emitted session.

The state is one row per session (key, window_start, window_end, aggregates, session__emitted,
updated). Merging is DataFrame operations only, no per-record Python and no UDF: the open sessions and
the epoch's accepted spans are sorted per key by start in one window; a span starts a new session when
it starts at or after the largest end before it, a running sum of those starts numbers the sessions,
and one aggregation per (key, number) merges them. (A pandas UDF per key group would do the same
sweep in Python; the window functions keep it in the JVM, in one sort.)
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Observation, Window
from pyspark.sql import functions as F

from coordinator.dataflow.declaration import Session
from coordinator.dataflow.compile import SESSION_EMITTED, emitted
from spark_jobs.operators.keyed_operators import LATE_COLUMNS, Folding, LateCount, materialized
from spark_jobs.records.event_time import event_ms

#: helper columns of the records while they are judged (a leading ``_``: never part of a dead letter's payload)
EVENT_MS, CLOSED = "_event_ms", "_closed"


def is_session(node: Any) -> bool:
    return isinstance(node.window, Session)


def session(state: DataFrame, rows: DataFrame, node: Any, columns: list[str], mark: int | None,
            checkpoint_id: int, dry: bool) -> tuple[DataFrame, DataFrame, DataFrame, int | None]:
    """(state n, the sessions emitted, the late records as dead letters, the watermark after the epoch);
    ``dry``: plan only (the schema of a dry run), no Spark job."""
    gap, lateness = node.window.gap_ms, node.lateness_ms
    done = F.col(SESSION_EMITTED)
    emitted_before = state.where(done)
    # the newest event time is observed in the pass that folds the epoch: no Spark job of its own
    seen = Observation()
    observed = rows if dry else rows.observe(seen, F.max(event_ms(rows, node.time)).alias("newest"))
    judged = _judged(observed, emitted_before, node)
    late = _late(mark, gap, lateness)
    counted = LateCount()
    judged = counted.counting(judged, late, dry)
    accepted = judged.where(F.col(EVENT_MS).isNotNull() & ~late)
    merged = _merge(state.where(~done).drop(SESSION_EMITTED), accepted, node, columns, checkpoint_id)
    if dry:
        return merged, merged.select(*emitted(columns)), _dead_letters(rows.limit(0), node, mark), mark
    merged = materialized(merged, dry)
    before = mark
    newest = seen.get["newest"]
    if newest is not None:
        mark = max(mark, newest - node.delay_ms) if mark is not None else newest - node.delay_ms
    fired = (F.col("window_end") + lateness <= F.lit(mark)) if mark is not None else F.lit(False)
    now_emitted = merged.where(fired).withColumn(SESSION_EMITTED, F.lit(True)).withColumn(
        "updated", F.lit(checkpoint_id).cast("long")).select(*columns)
    closed = emitted_before.unionByName(now_emitted)
    if mark is not None:  # no record can reach it any more: every one before its end is late by its own span
        closed = closed.where(F.col("window_end") + gap + lateness > F.lit(mark))
    late_rows = counted.rows(_judged(rows, emitted_before, node).where(late))
    return (merged.where(~fired).unionByName(closed), merged.where(fired).select(*emitted(columns)),
            _dead_letters(late_rows, node, before), mark)


def _judged(rows: DataFrame, emitted_before: DataFrame, node: Any) -> DataFrame:
    """The records with their event time (``_event_ms``) and the largest end of their key's sessions
    emitted already (``_closed``, null when none), their columns in their order."""
    keys = list(node.key_names)
    closed = emitted_before.groupBy(*keys).agg(F.max("window_end").alias(CLOSED))
    timed = rows.withColumn(EVENT_MS, event_ms(rows, node.time))
    return timed.join(closed, keys, "left").select(*rows.columns, EVENT_MS, CLOSED)


def _late(mark: int | None, gap: int, lateness: int) -> Column:
    """Whether a judged record is late, the watermark before its epoch being ``mark``."""
    if mark is None:
        return F.lit(False)
    t = F.col(EVENT_MS)
    return (t + gap + lateness <= F.lit(mark)) | F.coalesce(t < F.col(CLOSED), F.lit(False))


def _merge(open_sessions: DataFrame, accepted: DataFrame, node: Any, columns: list[str],
           checkpoint_id: int) -> DataFrame:
    """The open sessions with the accepted records' spans, overlapping ones merged: one sort per key."""
    keys = list(node.key_names)
    t = F.col(EVENT_MS)
    folding = Folding(node, [t.alias("window_start"), (t + node.window.gap_ms).alias("window_end")], checkpoint_id)
    spans = open_sessions.unionByName(accepted.select(*folding.contributions))
    by_start = Window.partitionBy(*keys).orderBy("window_start", "window_end")
    reach = F.max("window_end").over(by_start.rowsBetween(Window.unboundedPreceding, -1))
    starts = (reach.isNull() | (F.col("window_start") >= reach)).cast("long")
    numbered = spans.withColumn("_session", F.sum(starts).over(
        by_start.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    merged = numbered.groupBy(*keys, "_session").agg(
        F.min("window_start").alias("window_start"), F.max("window_end").alias("window_end"), *folding.merges,
        F.max("updated").alias("updated"))
    return folding.with_means(merged).withColumn(SESSION_EMITTED, F.lit(False)).select(*columns)


def _dead_letters(late: DataFrame, node: Any, mark: int | None) -> DataFrame:
    """The late records as the window's dead letters (``keyed_operators.LATE_COLUMNS``), with their reason."""
    has = set(late.columns)
    gap = node.window.gap_ms
    payload = F.to_json(F.struct(*[F.col(c) for c in late.columns if not c.startswith("_")]))
    settings = f"the watermark was {mark} (gap {gap} ms, delay {node.delay_ms} ms, allowed lateness " \
               f"{node.lateness_ms} ms)"
    t = F.col(EVENT_MS) if EVENT_MS in has else F.lit(None).cast("long")
    closed = F.col(CLOSED) if CLOSED in has else F.lit(None).cast("long")
    reason = F.when(t < closed, F.format_string(
        f"late for {node.name}: event time %d is before the end %d of a session of its key emitted already: "
        f"{settings}", t, closed)).otherwise(F.format_string(
            f"late for {node.name}: event time %d: a session of its own would end at %d and be emitted "
            f"already: {settings}", t, t + gap))
    return late.select(
        (F.col("_partition") if "_partition" in has else F.lit(node.name)).alias(LATE_COLUMNS[0]),
        (F.col("_seq") if "_seq" in has else F.lit(-1).cast("long")).alias(LATE_COLUMNS[1]),
        reason.alias(LATE_COLUMNS[2]), payload.alias(LATE_COLUMNS[3]),
    )
