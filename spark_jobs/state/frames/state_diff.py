"""Incremental snapshots of a state whose rows leave it without a tombstone of their own: a window's
(a fired window leaves, a session merges into another), a lookup join's (a waiting record leaves once
matched, a key's row when a newer one comes) and an interval join's (a row leaves once no record to
come can match it).

Such an operator does not say what it removed, so its delta is taken against the state of the base
checkpoint itself, held in memory since that snapshot was written (or restored): the rows that are
new or differ in any column, and a tombstone (``coordinator.sinks.deletes.DELETE`` true, every other
column but the row's identity null) for each row of the base that is gone. A restore keeps each row's
version of the newest link and drops the tombstones (``spark_jobs.state.keyed_state.restore``), so a
chain gives back exactly the state it was taken from, while the bytes written follow the epoch's
changes, not the state's size. The comparison reads both states whole, in the asynchronous phase.

Each row has an identity no other row of the state shares: a window's (key, start), a join's (key,
side, source position, ``_n``: the row's number among those an upstream flat_map made of one record).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from coordinator.sinks.deletes import DELETE

#: the kinds of state whose deltas are taken against their base
DIFFED = ("window", "join", "interval_join")


@dataclass
class HeldStates:
    """Operator -> checkpoint -> its state, as snapshotted (or restored): the bases of next deltas."""

    states: dict[str, dict[int, DataFrame]] = field(default_factory=dict)

    def hold(self, operator: str, checkpoint_id: int, state: DataFrame) -> None:
        self.states.setdefault(operator, {})[checkpoint_id] = state

    def base(self, operator: str, checkpoint_id: int | None) -> DataFrame | None:
        return None if checkpoint_id is None else self.states.get(operator, {}).get(checkpoint_id)

    def release_before(self, operator: str, checkpoint_id: int | None) -> None:
        """Forget the states older than ``checkpoint_id`` (the current base: no later delta needs them)."""
        if checkpoint_id is not None:
            held = self.states.get(operator, {})
            for old in [c for c in held if c < checkpoint_id]:
                del held[old]


def delta(state: DataFrame, base: DataFrame, identity: tuple[str, ...], checkpoint_id: int) -> DataFrame:
    """The rows of ``state`` not in ``base`` as they are (any column differs), with ``DELETE`` null, and a
    tombstone for each identity of ``base`` that ``state`` no longer holds."""
    columns = state.columns
    changed = state.subtract(base.select(*columns)).withColumn(DELETE, F.lit(None).cast("boolean"))
    gone = base.select(*identity).subtract(state.select(*identity))
    types = dict(state.dtypes)
    tombstones = gone.select(*[
        F.col(c) if c in identity else
        F.lit(checkpoint_id).cast("long").alias(c) if c == "updated" else
        F.lit(None).cast(types[c]).alias(c)
        for c in columns], F.lit(True).alias(DELETE))
    return changed.unionByName(tombstones)
