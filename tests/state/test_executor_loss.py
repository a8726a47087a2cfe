"""A run that loses an executor holding its in-memory state starts over from the newest completed checkpoint
(spark_jobs.run.executor_loss); the separate-hosts test shows it on a real cluster."""

from __future__ import annotations

import pytest

from spark_jobs.run.executor_loss import LOST_BLOCKS, RESTARTS, restarting_after_lost_executors


def runs(*outcomes: object):
    """An attempt that fails or returns, in turn, as ``outcomes`` say; the ``first`` flags it was given."""
    seen: list[bool] = []

    def attempt(first: bool) -> object:
        seen.append(first)
        outcome = outcomes[len(seen) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return attempt, seen


def test_lost_blocks_restart_the_run_from_the_newest_checkpoint_as_often_as_allowed() -> None:
    lost = RuntimeError(f"org.apache.spark.SparkException: [{LOST_BLOCKS}] Checkpoint block rdd_26_1 not found!")
    attempt, seen = runs(*[lost] * RESTARTS, "report")
    said: list[str] = []
    assert restarting_after_lost_executors("views", attempt, said.append) == "report"
    assert seen == [True] + [False] * RESTARTS  # only the first run is the one asked for (--restore-from)
    assert len(said) == RESTARTS and all("starting over from the newest completed checkpoint" in s for s in said)

    attempt, seen = runs(*[lost] * (RESTARTS + 1))
    with pytest.raises(RuntimeError, match=LOST_BLOCKS):
        restarting_after_lost_executors("views", attempt, said.append)
    assert len(seen) == RESTARTS + 1


def test_any_other_failure_is_raised_at_once() -> None:
    attempt, seen = runs(ValueError("a segment changed"), "report")
    with pytest.raises(ValueError, match="a segment changed"):
        restarting_after_lost_executors("views", attempt, print)
    assert seen == [True]
