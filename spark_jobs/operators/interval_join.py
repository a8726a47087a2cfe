"""The interval join of two streams (``KeyedStream.interval_join``), one epoch: state n-1 and the epoch's
records of both inputs -> state n, the joined rows, the late records as dead letters, the watermark.

Definitions (ta: a left row's event time, tb: a right row's, both epoch ms through ``event_ms``; lower,
upper: the bounds; W: the watermark before the epoch, W': after it):

- A left row and a right row match when their keys are equal and tb - lower <= ta <= tb + upper.
- W' = min(newest left event time, newest right event time) - delay, over every record of both inputs
  so far (late ones too); none until both inputs sent a record. It is never stored on its own: the
  newest row of each side never leaves the state (below), so W is read back from state n-1. It only
  grows.
- A record is late when W is set and its event time is below it (t < W), or when it has no event time:
  a dead letter of the operator (``<name>_late``) with its reason. Every later record is at or past W,
  so the rows a late record would match may have left the state already; a record at or past W finds
  every row it can match.
- Each pair is emitted once, in the epoch where the later of its two rows arrives: the epoch's left
  rows against every right row (buffered and new), and the buffered left rows against the epoch's
  right rows.
- After the epoch, a left row leaves the state once ta + lower < W' (no right row at or past W' can
  match it), a right row once tb + upper < W'. (The newest row of a side stays: W' <= its t - delay.)
- ``how="left"``: a left row that matched nothing by the time it leaves the state is emitted once,
  then, with nulls for the right columns. A left row remembers whether it matched (``_matched``).

The state is one row per buffered record: key, ``_side`` ("L" or "R"), its source position
``_partition`` and ``_seq`` (offset), ``_n`` (its number among the rows of the same key and position:
an upstream flat_map may make several of one record), ``_ts`` (its event time), ``_matched``, the left
columns (null on right rows), the right columns (null on left rows; a name the left has gets
``_right``), ``updated`` (the epoch that added it or matched it first). (key, _side, _partition, _seq,
_n) is a row's identity: the same in a replay of its epoch, so a recovery or a recomputation (verify)
rebuilds the same rows. A stream without source positions (an upstream operator dropped
them) gets ``_partition`` "" and ``_seq`` a hash of the row.

Emits (key, the left columns, the right columns, ``_partition``, ``_seq``: the left row's source
position). All DataFrame operations: an equi-join on the key with a condition on the times.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Observation, Window
from pyspark.sql import functions as F

from coordinator.dataflow.declaration import late_sink_name
from spark_jobs.operators.keyed_operators import LATE_COLUMNS, LateCount, materialized, no_rows
from spark_jobs.records.event_time import event_ms

SIDE, PARTITION, SEQ, N, TS, MATCHED = "_side", "_partition", "_seq", "_n", "_ts", "_matched"
#: a right row's event time while it is joined (beside the left row's ``_ts``)
RIGHT_TS = "_ts_right"
HIDDEN = (SIDE, PARTITION, SEQ, N, TS, MATCHED)


class Columns:
    """The columns of one interval join: its key, the left input's and the right input's value columns
    (the right ones under their output names) and their types."""

    def __init__(self, node: Any, left: DataFrame, right: DataFrame) -> None:
        self.node = node
        self.keys = list(node.key_names)
        self.right_keys = [c for c, _ in node.other_key]
        for side, name, df, time in (("left", node.inputs[0], left, node.time),
                                     ("right", node.inputs[1], right, node.interval.right_time)):
            if time not in df.columns:
                raise ValueError(f"interval join {node.name!r}: the {side} input ({name!r}) has no event-time "
                                 f"column {time!r}; it has {', '.join(df.columns)}")
        position = {PARTITION, SEQ}
        self.left = [c for c in left.columns if c not in (*self.keys, *position)]
        self.renamed = {c: (f"{c}_right" if c in self.left or c in self.keys else c)
                        for c in right.columns if c not in (*self.right_keys, *position)}
        self.right = list(self.renamed.values())
        self.types = {**dict(left.dtypes), **{self.renamed[c]: t for c, t in right.dtypes if c in self.renamed},
                      **{k: t for k, (_, t) in zip(self.keys, left.select(*self.keys).dtypes, strict=True)}}

    def state(self, df: DataFrame, side: str, checkpoint_id: int) -> DataFrame:
        """The epoch's accepted rows of one side (keys and values under their output names, with
        ``_ts``) as state rows."""
        have = set(df.columns)
        ordered = F.xxhash64(*[F.col(c) for c in df.columns if c not in (PARTITION, SEQ)])
        seq = F.col(SEQ) if SEQ in have else F.xxhash64(*[F.col(c) for c in df.columns if c != TS])
        part = F.col(PARTITION) if PARTITION in have else F.lit("")
        positioned = df.withColumn(PARTITION, part).withColumn(SEQ, seq)
        numbered = positioned.withColumn(N, F.row_number().over(
            Window.partitionBy(*self.keys, PARTITION, SEQ).orderBy(TS, ordered)))
        return numbered.select(
            *self.keys, F.lit(side).alias(SIDE), F.col(PARTITION).cast("string").alias(PARTITION),
            F.col(SEQ).cast("long").alias(SEQ), F.col(N).cast("int").alias(N), F.col(TS).alias(TS),
            F.lit(False).alias(MATCHED),
            *[(F.col(c) if c in have else F.lit(None).cast(self.types[c])).alias(c) for c in (*self.left, *self.right)],
            F.lit(checkpoint_id).cast("long").alias("updated"))

    @property
    def output(self) -> list[str]:
        return [*self.keys, *self.left, *self.right, PARTITION, SEQ]


def watermark(state: DataFrame, delay_ms: int) -> int | None:
    """The watermark the state stands at: the smaller of both sides' newest buffered event times minus the
    delay (each side's newest row never leaves the state), None while a side has none (one Spark job)."""
    row = state.agg(F.max(F.when(F.col(SIDE) == "L", F.col(TS))).alias("left"),
                    F.max(F.when(F.col(SIDE) == "R", F.col(TS))).alias("right")).first()
    return _mark(row["left"], row["right"], delay_ms)


def _mark(left: int | None, right: int | None, delay_ms: int) -> int | None:
    return None if left is None or right is None else min(left, right) - delay_ms


def epoch(state: DataFrame | None, left: DataFrame, right: DataFrame, node: Any, checkpoint_id: int,
          dry: bool = False, watermarks: dict[str, int | None] | None = None
          ) -> tuple[DataFrame, DataFrame, DataFrame, int | None]:
    """(state n, the joined rows, the late records as dead letters, the watermark after the epoch);
    ``dry``: plan only (the schema of a dry run), no Spark job; ``watermarks``: the watermark this run's
    previous epoch left (operator -> watermark), else (a restored state) it is read from the state."""
    bounds = node.interval
    cols = Columns(node, left, right)
    if dry or state is None:
        mark = None
    elif watermarks is not None and node.name in watermarks:
        mark = watermarks[node.name]
    else:
        mark = watermark(state, node.delay_ms)
    sides = []
    late = []
    counts: list[LateCount] = []
    for side, rows, time, keys, renamed in (("L", left, node.time, cols.keys, {}),
                                            ("R", right, bounds.right_time, cols.right_keys, cols.renamed)):
        timed = rows.withColumn(TS, event_ms(rows, time))
        is_late = F.col(TS).isNull() | (F.col(TS) < F.lit(mark) if mark is not None else F.lit(False))
        late.append(_dead_letters(timed.where(is_late), node, side, time, mark))
        counts.append(LateCount())  # in the pass that materializes the accepted rows
        accepted = counts[-1].counting(timed, is_late, dry).where(~is_late).select(
            *[F.col(k).alias(out) for k, out in zip(keys, cols.keys, strict=True)],
            *[F.col(c).alias(renamed.get(c, c)) for c in timed.columns if c not in keys])
        sides.append(cols.state(accepted, side, checkpoint_id))
    if state is None:
        state = sides[0].limit(0)
    buffered_left, buffered_right = state.where(F.col(SIDE) == "L"), state.where(F.col(SIDE) == "R")
    fresh = materialized(sides[0].unionByName(sides[1]), dry)  # the epoch's accepted rows of both sides: one job
    new_left, new_right = fresh.where(F.col(SIDE) == "L"), fresh.where(F.col(SIDE) == "R")
    all_right = buffered_right.unionByName(new_right)
    pairs = _pairs(new_left, all_right, cols, bounds).unionByName(_pairs(buffered_left, new_right, cols, bounds))
    pairs = materialized(pairs, dry)
    # a left row that matched in this epoch for the first time: flagged, ``updated`` n
    hit = pairs.select(*cols.keys, PARTITION, SEQ, N).distinct().withColumn("_hit", F.lit(True))
    all_left = buffered_left.unionByName(new_left).join(hit, [*cols.keys, PARTITION, SEQ, N], "left")
    first = F.coalesce(F.col("_hit"), F.lit(False)) & ~F.col(MATCHED)
    all_left = all_left.select(*[F.col(c) for c in state.columns if c not in (MATCHED, "updated")],
                               (F.col(MATCHED) | first).alias(MATCHED),
                               F.when(first, F.lit(checkpoint_id).cast("long")).otherwise(F.col("updated")).alias(
                                   "updated")).select(*state.columns)
    merged = all_left.unionByName(all_right)
    joined = pairs.select(*cols.output)
    dead = late[0].unionByName(late[1])
    if dry:
        return merged, joined, dead, mark
    if not any(c.late for c in counts):  # one empty frame, not a union of two (a union is copied: a job)
        dead = no_rows(dead)
    newest = Observation()
    merged = merged.observe(newest, F.max(F.when(F.col(SIDE) == "L", F.col(TS))).alias("left"),
                            F.max(F.when(F.col(SIDE) == "R", F.col(TS))).alias("right")).localCheckpoint(eager=True)
    after = _mark(newest.get["left"], newest.get["right"], node.delay_ms)
    if mark is not None and after is not None:
        after = max(mark, after)
    if after is None:
        return merged, joined, dead, after
    leaving = ((F.col(SIDE) == "L") & (F.col(TS) + bounds.lower_ms < F.lit(after))) | (
        (F.col(SIDE) == "R") & (F.col(TS) + bounds.upper_ms < F.lit(after)))
    if bounds.how == "left":
        unmatched = merged.where(leaving & (F.col(SIDE) == "L") & ~F.col(MATCHED)).select(*cols.output)
        joined = joined.unionByName(unmatched)
    # a filter of a local copy: immutable as it is, read by the snapshot and the next epoch without a job of its own
    return merged.where(~leaving), joined, dead, after


def _pairs(lefts: DataFrame, rights: DataFrame, cols: Columns, bounds: Any) -> DataFrame:
    """The matching pairs of these left and right state rows: one equi-join on the key, the times' condition
    in it."""
    r = rights.select(*cols.keys, F.col(TS).alias(RIGHT_TS), *cols.right)
    l_ = lefts.select(*cols.keys, PARTITION, SEQ, N, TS, *cols.left)
    within = (F.col(TS) >= F.col(RIGHT_TS) - bounds.lower_ms) & (F.col(TS) <= F.col(RIGHT_TS) + bounds.upper_ms)
    return l_.join(r, cols.keys, "inner").where(within).select(*cols.keys, PARTITION, SEQ, N, *cols.left,
                                                                 *cols.right)


def _dead_letters(late: DataFrame, node: Any, side: str, time: str, mark: int | None) -> DataFrame:
    """One side's late records as the operator's dead letters (``keyed_operators.LATE_COLUMNS``), with
    their reason."""
    has = set(late.columns)
    which = f"{'left' if side == 'L' else 'right'} input {node.inputs[0 if side == 'L' else 1]!r}"
    payload = F.to_json(F.struct(*[F.col(c) for c in late.columns if not c.startswith("_")]))
    reason = F.when(F.col(TS).isNull(), F.lit(
        f"no event time for {node.name}: column {time!r} of the {which} is null")).otherwise(F.format_string(
            f"late for {node.name}: event time %d of the {which} is below the watermark {mark} (the older of "
            f"both inputs' newest event times minus the delay {node.delay_ms} ms): rows it would match may "
            f"have left the state", F.col(TS)))
    return late.select(
        (F.col(PARTITION) if PARTITION in has else F.lit(late_sink_name(node.name))).alias(LATE_COLUMNS[0]),
        (F.col(SEQ) if SEQ in has else F.lit(-1).cast("long")).alias(LATE_COLUMNS[1]),
        reason.alias(LATE_COLUMNS[2]), payload.alias(LATE_COLUMNS[3]),
    )
