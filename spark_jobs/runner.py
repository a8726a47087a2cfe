"""The epoch runner: restore, then process every pending epoch in order, in one application.

1. restore the keyed state of the last completed checkpoint (or the one asked for);
2. for each pending barrier n: read epoch n from every source partition, run the
   operators, keep state n as an immutable local copy (localCheckpoint), hand it
   to the snapshot writer, and go on with epoch n+1.

Epoch n holds the records between the previous processed barrier's cut and
barrier n's cut, so a failed checkpoint's records simply belong to the next one.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from sqlalchemy import select

from coordinator import recovery, rescale, segment_changes, source, state_chain
from coordinator.faults import fault_point
from coordinator.catalog.models import DeadLetter, SourceSegment
from coordinator.state_chain import ChainLink
from coordinator.errors import StateIntegrityError
from coordinator.jobs import JobDefinition
from coordinator.store import CheckpointStore
from spark_jobs import back_edge_log, iterate, keyed_state
from spark_jobs.progress import Steps
from spark_jobs.epoch_source import read_epoch, read_lines
from spark_jobs.job_runtime import operators_of
from spark_jobs.operators import is_iterative
from spark_jobs.snapshot import SnapshotMode, SnapshotTiming, SnapshotWriter


@dataclass(frozen=True)
class EpochPlan:
    checkpoint_id: int
    segments: list[SourceSegment]
    dead_offsets: list[tuple[str, int]]

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments) - len(self.dead_offsets)


@dataclass
class Restored:
    """Restored operator state, verified: where it comes from and the files it was read from."""

    checkpoint_id: int | None
    state: DataFrame
    links: list[ChainLink]
    chain_length: int
    #: subtask -> the checkpoint its state is at (later than checkpoint_id after a partial recovery)
    heads: dict[int, int]
    #: jobs with a loop: back-edge log of checkpoint_id (verified), the loop head's first input
    back_edge: DataFrame | None = None
    back_edge_records: int = 0
    #: the parallelism checkpoint_id was taken at (None: no checkpoint)
    parallelism: int | None = None

    def behind(self, checkpoint_id: int, parallelism: int) -> frozenset[int]:
        """Subtasks that must process epoch ``checkpoint_id`` (the others are already past it)."""
        base = self.checkpoint_id or 0
        return frozenset(i for i in range(parallelism) if self.heads.get(i, base) < checkpoint_id)


@dataclass
class EpochMetrics:
    checkpoint_id: int
    records: int
    process_s: float
    state_rows: int = 0


@dataclass
class RunReport:
    restored_from: int | None
    epochs: list[EpochMetrics] = field(default_factory=list)
    snapshots: list[SnapshotTiming] = field(default_factory=list)
    restore_s: float = 0.0
    total_s: float = 0.0

    @property
    def failed(self) -> list[SnapshotTiming]:
        return [t for t in self.snapshots if t.error]


def log(msg: str) -> None:
    print(msg, file=sys.stdout, flush=True)


class EpochRunner:
    def __init__(
        self,
        spark: SparkSession,
        store: CheckpointStore,
        job: JobDefinition,
        data_dir: Path,
        state_uri: str,
        mode: SnapshotMode = SnapshotMode.ASYNC,
        restore_from: int | None = None,
        max_epochs: int | None = None,
    ) -> None:
        self.spark = spark
        self.store = store
        self.job = job
        self.ops = operators_of(job)
        self.data_dir = data_dir
        self.state_uri = state_uri
        self.mode = mode
        self.restore_from = restore_from
        self.max_epochs = max_epochs

    # -- planning ------------------------------------------------------------------
    def restore_point(self) -> int | None:
        """The checkpoint to restore (recovery.resolve: the one asked for must be COMPLETED)."""
        return recovery.resolve(self.store, self.job.name, self.restore_from)

    def plan(self, restored: int | None) -> list[EpochPlan]:
        pending = self.store.pending_after(self.job.name, restored or 0)
        if self.max_epochs is not None:
            pending = pending[: self.max_epochs]
        with self.store.sessions() as s:
            dead = s.execute(
                select(DeadLetter.checkpoint_id, DeadLetter.partition, DeadLetter.offset).where(
                    DeadLetter.job == self.job.name
                )
            ).all()
        prev_cut = self.store.cut(self.job.name, restored) if restored else {}
        plans = []
        for ck in pending:
            cut = self.store.cut(self.job.name, ck.checkpoint_id)
            plans.append(self._plan_range(prev_cut, cut, ck.checkpoint_id, dead))
            prev_cut = cut
        return plans

    def plan_range(self, start: dict[str, int], end: dict[str, int], checkpoint_id: int) -> EpochPlan:
        """The records between two cuts, as one epoch (e.g. everything before a cut, for verify)."""
        with self.store.sessions() as s:
            dead = s.execute(
                select(DeadLetter.checkpoint_id, DeadLetter.partition, DeadLetter.offset).where(
                    DeadLetter.job == self.job.name
                )
            ).all()
        return self._plan_range(start, end, checkpoint_id, dead)

    def _plan_range(self, start: dict[str, int], end: dict[str, int], checkpoint_id: int, dead) -> EpochPlan:
        segments = self.store.segments_between(self.job.name, start, end)
        offsets = [(p, o) for _, p, o in dead if start.get(p, 0) <= o < end.get(p, 0)]
        return EpochPlan(checkpoint_id, segments, offsets)

    def check_segments(self, plans: list[EpochPlan]) -> None:
        """Every segment an epoch reads is still what inject registered (SourceError, exit 2, naming
        it), before anything runs: a deleted, renamed, truncated, appended or rewritten segment would
        otherwise lose records, count them twice, or fail inside Spark (``coordinator.segment_changes``)."""
        segment_changes.check_before_run(self.input_dir, [(f"of epoch {p.checkpoint_id}", p.segments) for p in plans])

    @property
    def input_dir(self) -> Path:
        return source.input_dir(self.data_dir, self.job.name)

    @cached_property
    def max_parallelism(self) -> int:
        """The job's key groups (its row's, fixed for its life)."""
        return self.store.job(self.job.name).max_parallelism

    # -- restore -------------------------------------------------------------------
    def chain(self, heads: dict[int, int]) -> tuple[list[ChainLink], int]:
        """The state operator's snapshot files from each subtask's head back to its full snapshot
        (coordinator.state_chain)."""
        return state_chain.chain(self.store, self.job.name, self.job.state_operator, heads)

    def restore(self, checkpoint_id: int | None, heads: dict[int, int] | None = None) -> Restored:
        """State at ``checkpoint_id``, checked file by file (StateIntegrityError names a bad one).

        Every subtask that acked the checkpoint is read, whatever the parallelism it was taken at:
        the state is one DataFrame, and each key's subtask is computed by the run's key-group rule.
        ``heads`` (partial recovery, same parallelism only): subtasks whose state is at a later,
        pending checkpoint they acked before the failure; they keep it."""
        if checkpoint_id is None:
            return Restored(None, self.spark.createDataFrame([], self.ops.state_schema), [], 0, {},
                            *self.restore_back_edge_log(None))
        if heads and is_iterative(self.ops):
            log("  the job has a loop: every task of it is upstream of every other, so all of them restart")
            heads = None
        taken_at = rescale.taken_at(self.store, self.job.name, checkpoint_id, self.job.state_operator)
        if taken_at != self.job.parallelism:
            log(f"  checkpoint {checkpoint_id} was taken at parallelism {taken_at}, this run is at "
                f"{self.job.parallelism}: every subtask's state is read and split by key groups "
                f"({self.max_parallelism}); every task restarts and the next snapshot is full")
            heads = None
        heads = dict.fromkeys(self.acked_subtasks(checkpoint_id, taken_at), checkpoint_id) | (heads or {})
        links, length = self.chain(heads)
        state = keyed_state.restore(self.spark, self.ops.state_schema, self.ops.key, links, self.job.parallelism)
        return Restored(checkpoint_id, state, links, length, heads, *self.restore_back_edge_log(checkpoint_id),
                        parallelism=taken_at)

    def acked_subtasks(self, checkpoint_id: int, taken_at: int) -> list[int]:
        """The state operator's subtasks that acked the checkpoint: all ``taken_at`` of them, or
        StateIntegrityError (a restore without one of them would silently lose its keys)."""
        op = self.job.state_operator
        acked = sorted({a.subtask for a in self.store.acks(self.job.name, checkpoint_id) if a.operator == op})
        if acked != list(range(taken_at)):
            raise StateIntegrityError(
                f"checkpoint {checkpoint_id} was taken at parallelism {taken_at}, but the catalog has acks of "
                f"{op} subtasks {acked}: its state is incomplete; recover from another checkpoint "
                f"(absreplay recover {self.job.name} --checkpoint N)"
            )
        return acked

    def restore_back_edge_log(self, checkpoint_id: int | None) -> tuple[DataFrame | None, int]:
        """Back-edge log ``checkpoint_id`` of a job with a loop, checked against the catalog, and its
        record count; (None, 0) for an acyclic job. It is the loop head's first input on resume."""
        if not is_iterative(self.ops):
            return None, 0
        if checkpoint_id is None:
            return back_edge_log.empty(self.spark, self.ops), 0
        return back_edge_log.restore(self.spark, self.store, self.job, self.ops, checkpoint_id)

    # -- the loop --------------------------------------------------------------------
    def run(self, restored: Restored | None = None) -> RunReport:
        """Process every pending epoch after the restore point; ``restored``: state already
        restored (and verified) by a recovery."""
        t_start = time.perf_counter()
        point = restored.checkpoint_id if restored else self.restore_point()
        plans = self.plan(point)
        report = RunReport(restored_from=point)
        if not plans:
            log(f"{self.job.name}: no pending epochs after checkpoint {point or 0}")
            return report
        self.check_segments(plans)
        p = self.job.parallelism
        keep = {} if restored is None else {
            plan.checkpoint_id: set(range(p)) - restored.behind(plan.checkpoint_id, p) for plan in plans
        }
        self.store.begin_attempt(self.job.name, [pl.checkpoint_id for pl in plans], str(self.mode), keep,
                                 definition=self.job)
        log(
            f"{self.job.name}: restoring from checkpoint {point or 'none'}, "
            f"{len(plans)} pending epoch(s) {plans[0].checkpoint_id}..{plans[-1].checkpoint_id}, snapshots {self.mode}, "
            f"parallelism {p}"
        )
        t0 = time.perf_counter()
        if restored is None:
            restored = self.restore(point)
        state, back_edge = restored.state, restored.back_edge
        if back_edge is not None:
            log(f"  feeding back-edge log {point or 0} ({restored.back_edge_records:,} records) to the loop head first")
        report.restore_s = time.perf_counter() - t0
        partitions = source.list_partitions(source.input_dir(self.data_dir, self.job.name))
        writer = SnapshotWriter(
            spark=self.spark,
            store=self.store,
            job=self.job,
            ops=self.ops,
            state_uri=self.state_uri,
            mode=self.mode,
            base=point,
            chain_length=restored.chain_length,
            full_every=self.store.policy(self.job.name).full_snapshot_every,
            partitions=partitions,
            max_parallelism=self.max_parallelism,
            base_parallelism=restored.parallelism,
            # what the restored chain says about how many keys an epoch changes
            last_full_rows=sum(link.rows for link in restored.links if link.full),
            last_changed_rows=self.store.sink_rows(self.job.name, point) if point else 0,
        )
        try:
            with Steps(len(plans), f"{self.job.name}: epochs") as steps:
                self._run_epochs(plans, restored, state, back_edge, writer, report, steps)
        except Exception:
            # a segment deleted or changed while this run read it: name it rather than Spark's traceback
            self.check_segments(plans)
            raise
        finally:
            report.snapshots = writer.close()
        report.total_s = time.perf_counter() - t_start
        for t in report.snapshots:
            if t.error:
                log(f"  checkpoint {t.checkpoint_id} FAILED: {t.error}")
        return report

    def _run_epochs(self, plans: list[EpochPlan], restored: Restored, state: DataFrame, back_edge: DataFrame | None,
                    writer: SnapshotWriter, report: RunReport, steps: Steps) -> None:
        p = self.job.parallelism
        input_dir = self.input_dir
        for i, plan in enumerate(plans, 1):
            t0 = time.perf_counter()
            if self.ops.needs_sequence_numbers or plan.dead_offsets:
                records = read_epoch(self.spark, input_dir, plan.segments, plan.dead_offsets)
            else:
                records = read_lines(self.spark, input_dir, plan.segments)
            fault_point("epoch.compute", plan.checkpoint_id)
            behind = restored.behind(plan.checkpoint_id, p)
            new_state, back_edge = iterate.epoch_step(self.ops, self.job, state, back_edge, records,
                                                      plan.checkpoint_id)
            if len(behind) < p:
                # partial recovery: subtasks already past this epoch keep their state and discard its records
                mine = keyed_state.subtask_of(self.ops.key, p, self.max_parallelism).isin(sorted(behind))
                new_state = new_state.where(mine).unionByName(state.where(~mine))
            state = new_state.localCheckpoint(eager=True)
            elapsed = time.perf_counter() - t0
            report.epochs.append(EpochMetrics(plan.checkpoint_id, plan.records, elapsed))
            writer.snapshot(plan.checkpoint_id, state, None if len(behind) == p else behind, back_edge=back_edge)
            steps.done(
                f"  [{i}/{len(plans)}] epoch {plan.checkpoint_id}: {plan.records:,} records "
                f"from {len(plan.segments)} segment(s) in {elapsed:.2f}s"
                + ("" if len(behind) == p else f" (subtasks {sorted(behind)} only)")
            )
