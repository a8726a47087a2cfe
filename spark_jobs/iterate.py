"""One epoch of a job, with or without an iterate loop: what the runner and verify share.

An acyclic job's epoch is ``ops.step``. A job with a loop carries its back-edge
log from epoch to epoch: epoch n starts with back-edge log n-1 (the restored
checkpoint's on recovery, the previous epoch's otherwise), runs at most
``job.loop_rounds`` rounds and hands back log n with state n.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from coordinator.jobs import JobDefinition
from spark_jobs.operators import SparkOperators, is_iterative


def epoch_step(
    ops: SparkOperators, job: JobDefinition, state: DataFrame, back_edge: DataFrame | None, records: DataFrame,
    checkpoint_id: int,
) -> tuple[DataFrame, DataFrame | None]:
    """(state n, back-edge log n) after epoch ``checkpoint_id``; the log is None for an acyclic job.
    The caller makes state n an immutable local copy (localCheckpoint) before snapshotting it; the
    loop's frames are materialized round by round already."""
    if not is_iterative(ops):
        return ops.step(state, records, checkpoint_id), None
    return ops.loop_step(state, records, back_edge, checkpoint_id, job.loop_rounds)


def quiesce(ops: SparkOperators, state: DataFrame, back_edge: DataFrame, checkpoint_id: int) -> DataFrame:
    """State n with back-edge log n fed back and the loop run until nothing circulates, no new input:
    the meaning of a checkpoint of a job with a loop (what it converges to before any new record)."""
    assert is_iterative(ops)
    no_records = state.sparkSession.createDataFrame([], "line string")
    return ops.loop_step(state, no_records, back_edge, checkpoint_id, None)[0]
