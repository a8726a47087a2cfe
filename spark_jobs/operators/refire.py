"""Re-firing windows (``window(..., refire=True)``): tumbling and sliding windows whose result is emitted
as soon as the watermark passes their end, and emitted again, replacing the row in their sinks, in each
later epoch whose records within the allowed lateness change it.

The window's state keeps, per window, ``window__emitted``: the checkpoint that last emitted it (null: not
yet). In an epoch, after the records are folded in and the watermark has moved to ``mark``:

- a window fires when its end is at or below ``mark`` and it was never emitted, or it took records in
  this epoch (its ``updated`` is this checkpoint): its row is emitted and stamped;
- a window leaves the state once its end plus the allowed lateness is at or below ``mark``: no record
  can reach it any more (later ones are dead letters, as for every window).

Its sinks upsert by (key..., window_start). A rewind to checkpoint N puts back each window's row as of N
(``rewound``), without any history of the sink: a window whose end plus the lateness was at or below
N's watermark had left the state by N and no record changed it after, so the sink's row now is its row
at N; every other window is in N's state, and its row at N is that state's if N had emitted it, else
none.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from coordinator.dataflow.compile import WINDOW_EMITTED


def fire(merged: DataFrame, mark: int | None, lateness: int, checkpoint_id: int) -> tuple[DataFrame, DataFrame]:
    """(state n, the windows emitted in epoch n) from the folded state and the watermark after the epoch."""
    if mark is None:  # no watermark yet: nothing is due
        return merged, merged.limit(0)
    due = F.col("window_end") <= F.lit(mark)
    fires = due & (F.col(WINDOW_EMITTED).isNull() | (F.col("updated") == F.lit(checkpoint_id)))
    # judged before the stamp replaces the column the judgement reads
    flagged = merged.withColumn("_fires", fires)
    stamped = flagged.withColumn(WINDOW_EMITTED, F.when(F.col("_fires"), F.lit(checkpoint_id).cast("long"))
                                 .otherwise(F.col(WINDOW_EMITTED)))
    return (stamped.where(F.col("window_end") + lateness > F.lit(mark)).drop("_fires"),
            stamped.where(F.col("_fires")).drop("_fires"))


def rewound(node: Any, columns: tuple[str, ...], state: DataFrame, mark: int | None, checkpoint_id: int,
            current: pa.Table) -> pa.Table:
    """A re-firing window's sink as of checkpoint ``checkpoint_id``: its columns and ``updated`` (the
    checkpoint that emitted the row), from the sink's rows now (``current``), the window's state at that
    checkpoint and its watermark ``mark`` then."""
    wanted = list(columns)
    in_state = state.where(F.col(WINDOW_EMITTED).isNotNull()).select(
        *wanted, F.col(WINDOW_EMITTED).alias("updated")).toArrow()
    if mark is None or current.num_rows == 0:
        return in_state
    ends = pc.add(current.column("window_start"), pa.scalar(node.window.size_ms, pa.int64()))
    closed = current.filter(pc.less_equal(pc.add(ends, pa.scalar(node.lateness_ms, pa.int64())),
                                          pa.scalar(mark, pa.int64())))
    closed = closed.select(wanted).append_column("updated", pa.repeat(pa.scalar(checkpoint_id, pa.int64()),
                                                                      closed.num_rows))
    return pa.concat_tables([closed.cast(in_state.schema), in_state])
