"""The contract between a job's Spark operators and the epoch runner (``spark_jobs.job_runtime``
makes them from a declared job)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType


class SparkOperators(Protocol):
    #: schema of the keyed state: key, values..., updated (checkpoint id of the last change)
    state_schema: StructType
    key: str
    #: columns of the sink table, in order (key first)
    sink_columns: tuple[str, ...]
    #: False: the operators read only ``line`` and the runner may use the faster line reader
    needs_sequence_numbers: bool

    def step(self, state: DataFrame, records: DataFrame, checkpoint_id: int) -> DataFrame:
        """State after epoch ``checkpoint_id``: rows it changed carry updated = checkpoint_id."""
        ...


@runtime_checkable
class LoopOperators(SparkOperators, Protocol):
    """Operators of a job with an iterate loop (DESIGN.md section 3, "Cycles").

    Their ``step`` runs the loop to its fixpoint (nothing left on the back-edge);
    the runner calls ``loop_step`` instead, which runs at most ``max_rounds``
    rounds and returns what is still circulating: back-edge log n.
    """

    #: schema of a back-edge record; ``back_edge_key`` routes it to the loop head's subtask
    back_edge_schema: StructType
    back_edge_key: str

    def loop_step(
        self, state: DataFrame, records: DataFrame, back_edge: DataFrame | None, checkpoint_id: int,
        max_rounds: int | None,
    ) -> tuple[DataFrame, DataFrame]:
        """(state n, back-edge log n) from state n-1, the epoch's records and back-edge log n-1,
        which the loop head consumes first. ``max_rounds=None``: until no record circulates.
        Both frames come back materialized (lineage cut), ready to snapshot."""
        ...


def is_iterative(ops: SparkOperators) -> bool:
    return isinstance(ops, LoopOperators)
