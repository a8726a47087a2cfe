"""State TTL of a keyed aggregate or process function, one epoch (``coordinator.dataflow.ttl`` says which keys).

After the operator has written the keys the epoch touched (``updated = n``), every live key it did not
write and whose TTL is over becomes a tombstone (key, null values, ``_delete`` true, ``updated = n``;
``spark_jobs.operators.deletes``): it leaves the state, the incremental snapshot carries the delete, and
each upsert sink of the operator deletes the key's row in that checkpoint's commit. In epochs: its
``updated`` is at or below the lineage's checkpoint ``ttl_epochs`` epochs back. In event time: its hidden
column ``ttl__event_ms`` plus ``ttl_ms`` is at or before the operator's watermark of the epoch before.

One projection over the state, no join: the state is read once per epoch anyway (it is materialized).
The keys dropped are counted per subtask in the same pass (an ``Observation``), acked as
``task_acks.keys_dropped``; an event-time TTL's watermark (the newest ``ttl__event_ms`` the epoch wrote)
is observed there too, and acked as a window's is.

An aggregate with a TTL keeps tombstones like a process function: ``aggregate`` folds its live rows
with the epoch's records (a key that expired starts again from nothing) and keeps the tombstones no
durable snapshot holds yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from coordinator.dataflow.declaration import Aggregate
from coordinator.dataflow.ttl import EVENT_TIME, expire_through
from coordinator.sinks.deletes import DELETE
from spark_jobs.operators import deletes
from spark_jobs.operators import keyed_operators as ko
from spark_jobs.records.event_time import event_ms
from spark_jobs.state.keyed_state import subtask_of


def ttl_of(node: Any) -> int | None:
    """The operator's TTL in epochs (None: none)."""
    return getattr(node, "ttl_epochs", None)


def event_ttl(node: Any) -> int | None:
    """The operator's TTL in event-time milliseconds (None: none)."""
    return getattr(node, "ttl_ms", None)


def has(node: Any) -> bool:
    return ttl_of(node) is not None or event_ttl(node) is not None


def has_ttl(nodes: Sequence[Any]) -> bool:
    """Whether any operator has a state TTL: what it drops depends on where epochs end."""
    return any(has(n) for n in nodes)


def counts_epochs(nodes: Sequence[Any]) -> bool:
    """Whether any operator's TTL counts epochs (a run reads its restore point's lineage)."""
    return any(ttl_of(n) is not None for n in nodes)


def aggregate(state: DataFrame, rows: DataFrame, node: Any, columns: list[str], checkpoint_id: int,
              durable: int | None) -> DataFrame:
    """``keyed_operators.aggregate`` over a state with tombstones: the live rows folded with the records;
    the tombstones kept until a durable snapshot holds them (``durable``), except where a record wrote
    their key again. An event-time TTL's column folds as the newest event time."""
    keys = list(node.key_names)
    state = deletes.purged(state, durable)
    values = [c for c in columns if c != DELETE]
    if event_ttl(node) is not None:
        rows = rows.withColumn(EVENT_TIME, event_ms(rows, node.time))
        node = replace(node, aggregates={**node.aggregates, EVENT_TIME: Aggregate("max", "long", EVENT_TIME)})
    folded = ko.aggregate(deletes.live(state).select(*values), rows, node, values, checkpoint_id)
    folded = folded.withColumn(DELETE, F.lit(None).cast("boolean")).select(*columns)
    written = folded.where(F.col("updated") == F.lit(checkpoint_id)).select(*keys)
    dead = state.where(deletes.is_tombstone()).join(written, keys, "left_anti")
    return folded.unionByName(dead.select(*columns))


def process(state: DataFrame, rows: DataFrame, node: Any, columns: list[str], checkpoint_id: int, dry: bool,
            durable: int | None) -> DataFrame:
    """``keyed_operators.process`` with an event-time TTL: the function never sees the hidden column; a key
    it writes keeps the newest event time of its state and of its records in the epoch."""
    keys = list(node.key_names)
    new = ko.process(state.drop(EVENT_TIME), rows, node, [c for c in columns if c != EVENT_TIME], checkpoint_id,
                     dry, durable)
    newest = rows.groupBy(*keys).agg(F.max(event_ms(rows, node.time)).alias("_ttl_newest"))
    before = deletes.live(state).select(*keys, F.col(EVENT_TIME).alias("_ttl_before"))
    written = F.col("updated") == F.lit(checkpoint_id)
    event = (F.when(deletes.is_tombstone(), F.lit(None))
             .when(written, F.greatest("_ttl_before", "_ttl_newest"))
             .otherwise(F.col("_ttl_before")).cast("long").alias(EVENT_TIME))
    joined = new.join(before, keys, "left").join(newest, keys, "left")
    return joined.select(*[event if c == EVENT_TIME else F.col(c) for c in columns])


@dataclass
class Expiry:
    """The TTL of a run's (or verify's) epochs: the lineage the next epoch starts from, and each epoch's
    keys dropped per subtask and event-time watermarks, observed while its state is materialized."""

    #: the checkpoints whose epochs, in order, produced the state the next epoch starts from
    lineage: list[int] = field(default_factory=list)
    #: the job's key groups (``keyed_state.subtask_of``); 0: not known (no counts are observed)
    max_parallelism: int = 0
    _seen: dict[str, tuple[Observation, int]] = field(default_factory=dict)

    def start(self, lineage: list[int], max_parallelism: int = 0) -> None:
        self.lineage, self.max_parallelism = list(lineage), max_parallelism
        self._seen = {}

    def _gone(self, node: Any, checkpoint_id: int, mark: int | None) -> Column | None:
        """Which rows of state n the TTL drops (None: none can go this epoch)."""
        live = ~deletes.is_tombstone()
        if ttl_of(node) is not None:
            through = expire_through(self.lineage, ttl_of(node))
            return None if through is None else live & (F.col("updated") <= F.lit(through))
        if mark is None:
            return None
        return live & (F.col("updated") != F.lit(checkpoint_id)) & (
            F.col(EVENT_TIME) + F.lit(event_ttl(node)) <= F.lit(mark))

    def expire(self, state: DataFrame, node: Any, columns: list[str], checkpoint_id: int, parallelism: int,
               dry: bool, mark: int | None = None) -> DataFrame:
        """State n with the keys whose TTL is over as tombstones (unchanged without a TTL, in a dry run, or
        while nothing can be over yet); ``mark``: an event-time TTL's watermark of the epoch before."""
        if dry or not has(node):
            return state
        keys = list(node.key_names)
        gone = self._gone(node, checkpoint_id, mark)
        metrics = []
        if gone is not None and self.max_parallelism:  # counted on the rows before they become tombstones
            metrics += _dropped_metrics(gone, keys, parallelism, self.max_parallelism)
        if event_ttl(node) is not None:
            written = F.col("updated") == F.lit(checkpoint_id)
            metrics.append(F.max(F.when(written & ~deletes.is_tombstone(), F.col(EVENT_TIME))).alias("newest"))
        if metrics:
            seen = Observation()
            self._seen[node.name] = (seen, parallelism)
            state = state.observe(seen, *metrics)
        if gone is None:
            return state
        return state.select(*[
            F.col(c) if c in keys else
            F.when(gone, F.lit(True)).otherwise(F.col(DELETE)).alias(DELETE) if c == DELETE else
            F.when(gone, F.lit(checkpoint_id).cast("long")).otherwise(F.col(c)).alias(c) if c == "updated" else
            F.when(~gone, F.col(c)).alias(c)
            for c in columns])

    def watermark(self, node: Any, before: int | None) -> int | None:
        """An event-time TTL's watermark after the epoch (its state materialized): the newest event time it
        has written so far."""
        seen = self._seen.get(node.name)
        newest = None if seen is None else seen[0].get.get("newest")
        return before if newest is None else max(before, newest) if before is not None else newest

    def finish(self, checkpoint_id: int) -> dict[str, dict[int, int]]:
        """After epoch ``checkpoint_id`` (its states materialized): operator -> subtask -> keys dropped; the
        epoch joins the lineage."""
        dropped = {}
        for op, (seen, p) in self._seen.items():
            got = seen.get
            dropped[op] = {i: int(got.get(f"dropped_{i}") or 0) for i in range(p)}
        self._seen = {}
        self.lineage.append(checkpoint_id)
        return dropped


def _dropped_metrics(gone: Column, keys: list[str], parallelism: int, max_parallelism: int) -> list[Column]:
    subtask = subtask_of(keys, parallelism, max_parallelism)
    return [F.sum(F.when(gone & (subtask == i), 1).otherwise(0)).alias(f"dropped_{i}") for i in range(parallelism)]
