"""Tombstones in a keyed operator's DataFrame state (``coordinator.sinks.deletes`` says what they are).

A key that leaves the state at checkpoint n stays in state n as a tombstone (key, null values,
``_delete`` true, ``updated = n``), so that whatever reads the rows changed after a base checkpoint (an
incremental snapshot, an upsert sink's staged output, the emitted stream) carries the delete. A
tombstone is kept in memory until a snapshot holding it is durable: the next epoch drops tombstones
at or below the newest durable checkpoint (``purged``), since every later snapshot is based on that
one or a newer one. Nothing else reads them: a restore and ``verify`` keep the live rows (``live``).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from coordinator.sinks.deletes import DELETE


def is_tombstone(column: str = DELETE) -> Column:
    return F.coalesce(F.col(column), F.lit(False))


def marker(flag: Column) -> Column:
    """The state's marker from a boolean: true for a delete, null (not false) for a live row, so that a live
    row hashes as it did before the column existed (Spark's hashes skip nulls: checksums are unchanged)."""
    return F.when(F.coalesce(flag, F.lit(False)), F.lit(True)).cast("boolean").alias(DELETE)


def live(state: DataFrame) -> DataFrame:
    """The state without its tombstones (the marker column kept, null on every row)."""
    return state.where(~is_tombstone()) if DELETE in state.columns else state


def purged(state: DataFrame, durable: int | None) -> DataFrame:
    """State n-1 without the tombstones no later snapshot needs: those of checkpoints at or below ``durable``,
    the newest checkpoint whose snapshot is durable (None: none is yet, every tombstone is kept)."""
    if durable is None or DELETE not in state.columns:
        return state
    return state.where(~is_tombstone() | (F.col("updated") > F.lit(durable)))
