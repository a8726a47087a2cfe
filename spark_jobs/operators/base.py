"""The contract between a job's Spark operators and the epoch runner."""

from __future__ import annotations

from typing import Protocol

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
