"""A run outlives a lost executor: what it held in memory is rebuilt from the newest completed checkpoint.

Between snapshots a run holds the DataFrame state of its windows, joins and other operators not on local
stores as local checkpoints (Spark's ``localCheckpoint``: blocks on the executors, fast, and gone with
their executor); a keyed aggregate on local stores survives on its own (its task rebuilds the store from
the checkpoint's files, ``spark_jobs.state.stores.loader``). When an executor dies with such blocks, the next
Spark job that reads them fails with ``CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND``. The run then starts over, in
the same application and under the same lease, from the newest completed checkpoint, exactly as the next
run would: the epochs after it are recomputed from their segments and their snapshots taken again (the
sinks commit completed checkpoints only, so nothing is emitted twice) — at most ``RESTARTS`` times.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

#: what Spark says when a job reads a local checkpoint whose executor is gone
LOST_BLOCKS = "CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND"
RESTARTS = 2

T = TypeVar("T")


def lost_with_an_executor(exc: BaseException) -> bool:
    """Whether ``exc`` is a Spark job failing on state blocks that died with their executor."""
    return LOST_BLOCKS in str(exc)


def restarting_after_lost_executors(job: str, attempt: Callable[[bool], T], log: Callable[[str], None]) -> T:
    """``attempt(first)``: one run (``first``: the run as asked; else from the newest completed checkpoint),
    started again after a lost executor, up to ``RESTARTS`` times; any other failure is raised as it is."""
    for restart in range(RESTARTS + 1):
        try:
            return attempt(restart == 0)
        except Exception as exc:
            if restart == RESTARTS or not lost_with_an_executor(exc):
                raise
            log(f"{job}: an executor was lost with state this run held in memory ({LOST_BLOCKS}): starting "
                f"over from the newest completed checkpoint (restart {restart + 1} of {RESTARTS})")
    raise AssertionError("unreachable")
