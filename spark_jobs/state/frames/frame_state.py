"""The DataFrame engine of the keyed-state interface (``spark_jobs.state.backend``).

An operator's state is one DataFrame of (key, values..., updated), materialized once per epoch as an
immutable local copy: the epoch's operator (``EpochStep.compute``, one of ``spark_jobs.operators``) reads
the whole state and returns the next. A snapshot writes every row, or the rows changed since its base: those
with ``updated`` after it, or, for a state whose rows leave it without a tombstone (a window's, a join's), its
difference from the base's state, held in memory since that snapshot (``state_diff``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator.dataflow.jobs import JobDefinition, StateSpec
from spark_jobs.state import keyed_state
from spark_jobs.state.backend import EpochStep, KeyedState, KeyedStateBackend, RestorePoint, SnapshotTarget
from spark_jobs.state.frames import state_diff


@dataclass(frozen=True, eq=False)
class FrameState(KeyedState):
    """An operator's state as one immutable DataFrame (None: a dry run's, whose schema is unknown yet)."""

    operator: str
    frame: DataFrame | None
    #: the bases of the next deltas of a window or a join (the engine's, read and written by the writer thread)
    held: state_diff.HeldStates = field(default_factory=state_diff.HeldStates, compare=False)
    output: DataFrame | None = None

    @property
    def columns(self) -> list[str]:
        return self.frame.columns

    def apply(self, step: EpochStep) -> FrameState:
        new, emitted = step.compute(self.frame)
        return FrameState(self.operator, new, self.held, emitted)

    @property
    def emitted(self) -> DataFrame | None:
        return self.output

    def keep_past(self, before: FrameState, behind: frozenset[int], key: tuple[str, ...], parallelism: int,
                  max_parallelism: int) -> FrameState:
        mine = keyed_state.subtask_of(key, parallelism, max_parallelism).isin(sorted(behind))
        merged = self.frame.where(mine).unionByName(before.frame.where(~mine)).localCheckpoint(eager=True)
        return FrameState(self.operator, merged, self.held, self.output)

    def rows(self, spark: SparkSession, since: int | None = None) -> DataFrame:
        return self.frame if since is None else self.frame.where(F.col("updated") > F.lit(since))

    def prefers_full(self, spec: StateSpec, base: int, changed: int, full_rows: int) -> bool:
        """Full when its delta's base is not in memory (a partial recovery restored another), or when most keys
        change anyway: an incremental chain of near-full deltas would only make restores slower."""
        if spec.kind in state_diff.DIFFED and self.held.base(self.operator, base) is None:
            return True
        return changed * 2 > full_rows

    def write_files(self, target: SnapshotTarget) -> dict:
        diffed = target.spec.kind in state_diff.DIFFED
        if target.full:
            rows = self.frame
        elif diffed:
            rows = state_diff.delta(self.frame, self.held.base(self.operator, target.base), target.spec.identity,
                                    target.checkpoint_id)
        else:
            rows = self.rows(target.spark, target.base)
        # a delta against the base: every row of it is a change; two shuffles' partitions: one file per subtask
        metrics = target.write_rows(rows, self.columns, None if diffed and not target.full else target.base,
                                    one_file_per_subtask=diffed and not target.full)
        if diffed:
            self.held.hold(self.operator, target.checkpoint_id, self.frame)
            self.held.release_before(self.operator, target.base)
        return metrics

    def forget_bases(self) -> None:
        self.held.states.pop(self.operator, None)


class FrameBackend(KeyedStateBackend):
    """The DataFrame states of a run's operators, as the restore read and checked them."""

    def __init__(self, job: JobDefinition, operators: set[str]) -> None:
        self.job, self._operators = job, operators
        self.held = state_diff.HeldStates()

    @property
    def operators(self) -> set[str]:
        return set(self._operators)

    def open(self, point: RestorePoint) -> dict[str, FrameState]:
        states = {op: FrameState(op, point.frames[op], self.held) for op in self._operators}
        if not point.partial:  # the restored states are the bases of the next deltas (``state_diff``)
            for spec in self.job.states:
                at = point.point(spec.operator)
                if spec.operator in states and spec.kind in state_diff.DIFFED and at:
                    self.held.hold(spec.operator, at, states[spec.operator].frame)
        return states
