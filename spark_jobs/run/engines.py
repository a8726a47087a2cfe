"""Which engine keeps each keyed operator's state in a run (``spark_jobs.state.backend``).

The store engine takes the keyed aggregates it can hold (``ABS_STATE_BACKEND=local``, the default:
``stores.provider.layout_of``); the DataFrame engine takes every other operator. The run sees only the
interface the two implement.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import SparkSession

from coordinator.dataflow.jobs import JobDefinition
from spark_jobs.state.backend import KeyedStateBackend
from spark_jobs.state.frames.frame_state import FrameBackend
from spark_jobs.state.stores.provider import StoreBackend


def backends_of(spark: SparkSession, job: JobDefinition, nodes: dict, state_uri: str, max_parallelism: int,
                incarnation: str, seen: Callable[[], dict[str, dict[int, str]]]) -> list[KeyedStateBackend]:
    """The run's engines, each with the operators it keeps; ``seen``: where the last run left the stores."""
    stores = StoreBackend.of(spark, job, nodes, state_uri, max_parallelism, incarnation, seen)
    taken = stores.operators if stores is not None else set()
    frames = FrameBackend(job, {spec.operator for spec in job.states} - taken)
    return [frames] if stores is None else [stores, frames]
