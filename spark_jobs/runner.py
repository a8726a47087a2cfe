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
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from sqlalchemy import select

from coordinator import source
from coordinator.faults import fault_point
from coordinator.catalog.models import DeadLetter, SourceSegment
from coordinator.errors import CheckpointNotFoundError
from coordinator.jobs import JobDefinition
from coordinator.lifecycle import CheckpointStatus
from coordinator.store import CheckpointStore
from spark_jobs import keyed_state
from spark_jobs.epoch_source import read_epoch, read_lines
from spark_jobs.operators import OPERATORS
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
        self.ops = OPERATORS[job.name]
        self.data_dir = data_dir
        self.state_uri = state_uri
        self.mode = mode
        self.restore_from = restore_from
        self.max_epochs = max_epochs

    # -- planning ------------------------------------------------------------------
    def restore_point(self) -> int | None:
        if self.restore_from is None:
            latest = self.store.latest_completed(self.job.name)
            return latest.checkpoint_id if latest else None
        ck = self.store.checkpoint(self.job.name, self.restore_from)
        if ck.status != CheckpointStatus.COMPLETED:
            raise CheckpointNotFoundError(self.job.name, self.restore_from, f"is {ck.status}, not COMPLETED")
        return ck.checkpoint_id

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

    @property
    def input_dir(self) -> Path:
        return source.input_dir(self.data_dir, self.job.name)

    # -- restore -------------------------------------------------------------------
    def chain(self, checkpoint_id: int) -> tuple[list[keyed_state.ChainLink], int]:
        """The snapshot files of the state operator at ``checkpoint_id``, and the chain's length.

        Links are ordered newest first per subtask; the last link of a subtask is its full snapshot."""
        op = self.job.state_operator
        links, length = [], 0
        heads = {a.subtask: a for a in self.store.acks(self.job.name, checkpoint_id) if a.operator == op}
        for subtask in range(self.job.parallelism):
            ack, n = heads.get(subtask), 0
            while ack is not None:
                n += 1
                if ack.state_uri:
                    links.append(keyed_state.ChainLink(ack.checkpoint_id, subtask, ack.state_uri, ack.state_rows,
                                                       ack.checksum, full=ack.base_checkpoint_id is None))
                if ack.base_checkpoint_id is None:
                    break
                ack = next(
                    (a for a in self.store.acks(self.job.name, ack.base_checkpoint_id) if a.operator == op and a.subtask == subtask),
                    None,
                )
            length = max(length, n)
        return links, length

    def restore(self, checkpoint_id: int | None) -> tuple[DataFrame, list[keyed_state.ChainLink], int]:
        if checkpoint_id is None:
            return self.spark.createDataFrame([], self.ops.state_schema), [], 0
        links, length = self.chain(checkpoint_id)
        state = keyed_state.restore(self.spark, self.ops.state_schema, self.ops.key, links, self.job.parallelism)
        return state, links, length

    # -- the loop --------------------------------------------------------------------
    def run(self) -> RunReport:
        t_start = time.perf_counter()
        restored = self.restore_point()
        plans = self.plan(restored)
        report = RunReport(restored_from=restored)
        if not plans:
            log(f"{self.job.name}: no pending epochs after checkpoint {restored or 0}")
            return report
        self.store.begin_attempt(self.job.name, [p.checkpoint_id for p in plans], str(self.mode))
        log(
            f"{self.job.name}: restoring from checkpoint {restored or 'none'}, "
            f"{len(plans)} pending epoch(s) {plans[0].checkpoint_id}..{plans[-1].checkpoint_id}, snapshots {self.mode}"
        )
        t0 = time.perf_counter()
        state, links, chain_length = self.restore(restored)
        report.restore_s = time.perf_counter() - t0
        partitions = source.list_partitions(source.input_dir(self.data_dir, self.job.name))
        writer = SnapshotWriter(
            spark=self.spark,
            store=self.store,
            job=self.job,
            ops=self.ops,
            state_uri=self.state_uri,
            mode=self.mode,
            base=restored,
            chain_length=chain_length,
            full_every=self.store.policy(self.job.name).full_snapshot_every,
            partitions=partitions,
            # what the restored chain says about how many keys an epoch changes
            last_full_rows=sum(link.rows for link in links if link.full),
            last_changed_rows=self.store.sink_rows(self.job.name, restored) if restored else 0,
        )
        input_dir = source.input_dir(self.data_dir, self.job.name)
        try:
            for i, plan in enumerate(plans, 1):
                t0 = time.perf_counter()
                if self.ops.needs_sequence_numbers or plan.dead_offsets:
                    records = read_epoch(self.spark, input_dir, plan.segments, plan.dead_offsets)
                else:
                    records = read_lines(self.spark, input_dir, plan.segments)
                fault_point("epoch.compute", plan.checkpoint_id)
                state = self.ops.step(state, records, plan.checkpoint_id).localCheckpoint(eager=True)
                elapsed = time.perf_counter() - t0
                report.epochs.append(EpochMetrics(plan.checkpoint_id, plan.records, elapsed))
                writer.snapshot(plan.checkpoint_id, state)
                log(
                    f"  [{i}/{len(plans)}] epoch {plan.checkpoint_id}: {plan.records:,} records "
                    f"from {len(plan.segments)} segment(s) in {elapsed:.2f}s"
                )
        finally:
            report.snapshots = writer.close()
        report.total_s = time.perf_counter() - t_start
        for t in report.snapshots:
            if t.error:
                log(f"  checkpoint {t.checkpoint_id} FAILED: {t.error}")
        return report
