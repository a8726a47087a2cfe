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
from dataclasses import dataclass, field, replace
from collections.abc import Callable, Iterator, Mapping
from functools import cache, cached_property
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from sqlalchemy import select

from coordinator.catalog import audit
from coordinator.checkpoints import recovery, weak
from coordinator.sources import segment_changes, source
from coordinator.faults import fault_point
from coordinator.catalog.models import DeadLetter, SourceSegment
from coordinator.dataflow.jobs import JobDefinition
from coordinator.checkpoints.store import CheckpointStore
from coordinator.sources.record_formats import ParquetFiles
from coordinator.sinks.dead_letters import DeadLetters
from spark_jobs.state import keyed_state
from spark_jobs.operators.dataflow import dataflow_of
from spark_jobs.records.epoch_source import epoch_of_file, read_epoch, read_lines, read_parquet_epoch
from spark_jobs.run.progress import Steps
from spark_jobs.records.record_parsing import parse, record_schema
from spark_jobs.run.restore import Restored, StateRestorer
from spark_jobs.run.snapshot import SnapshotMode, SnapshotTiming, SnapshotWriter
from spark_jobs.state.provider import StoreBackend, StoreState, incarnation
from spark_jobs.run.weak_snapshots import WeakSnapshotWriter


@dataclass(frozen=True)
class EpochPlan:
    checkpoint_id: int
    segments: list[SourceSegment]
    dead_offsets: list[tuple[str, int]]
    #: the checkpoint's dead letters against its epoch's records, as inject and the view say them
    dead_letters: audit.EpochDeadLetters | None = None

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments) - len(self.dead_offsets)

    @property
    def dead_letter_note(self) -> str:
        """The epoch line's dead letters and their share: an epoch of refused records is not a quiet one."""
        return f"; {self.dead_letters.summary()}" if self.dead_letters and self.dead_letters.count else ""


@dataclass
class EpochMetrics:
    checkpoint_id: int
    records: int
    process_s: float
    state_rows: int = 0
    #: how its store tasks found their stores (``StoreState.loads``): hits, reloads, the longest reload's seconds
    store_hits: int = 0
    store_reloads: int = 0
    store_reload_s: float = 0.0

    def count_stores(self, states: Mapping[str, object]) -> EpochMetrics:
        loads = store_loads(states)
        self.store_hits = sum(1 for kind, _ in loads if kind == "hit")
        reloads = [s for kind, s in loads if kind == "reload"]
        self.store_reloads, self.store_reload_s = len(reloads), max(reloads, default=0.0)
        return self


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


#: a catch-up runs at most this many epochs, and this many records, at once (``EpochRunner._together``)
TOGETHER_EPOCHS = 16
TOGETHER_RECORDS = 5_000_000


class _Later(Mapping):
    """A mapping made by ``make`` the first time it is read."""

    def __init__(self, make: Callable[[], dict]) -> None:
        self._make = cache(make)

    def __getitem__(self, key: str) -> DataFrame:
        return self._make()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._make())

    def __len__(self) -> int:
        return len(self._make())


def log(msg: str) -> None:
    print(msg, file=sys.stdout, flush=True)


def store_loads(states: Mapping[str, object]) -> list[tuple[str, float]]:
    """How an epoch's store tasks found their stores (``StoreState.loads``): ("hit" | "reload", seconds) each;
    none for an epoch that ran no store task (a group's later epochs: its first reports the group's)."""
    return [v[:2] for st in states.values() if isinstance(st, StoreState) and st.loads for v in st.loads.values()]


def store_note(metrics: EpochMetrics) -> str:
    """The progress line's word on the stores: hits, and reloads with the longest one's seconds."""
    parts = [f"{metrics.store_hits} hit{'s' * (metrics.store_hits != 1)}"] if metrics.store_hits else []
    if metrics.store_reloads:
        parts.append(f"{metrics.store_reloads} reload{'s' * (metrics.store_reloads != 1)} "
                     f"({metrics.store_reload_s:.2f}s)")
    return "; stores: " + ", ".join(parts) if parts else ""


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
        self.flow = dataflow_of(job)
        self.data_dir = data_dir
        self.state_uri = state_uri
        # a weak-consistency job's snapshots are its own kind (none stays the no-snapshot baseline)
        self.weak = job.consistency == "weak"
        self.mode = SnapshotMode.WEAK if self.weak and mode is not SnapshotMode.NONE else mode
        self.restore_from = restore_from
        self.max_epochs = max_epochs

    # -- planning ------------------------------------------------------------------
    def restore_point(self) -> int | None:
        """The checkpoint to restore (recovery.resolve: the one asked for must be COMPLETED); a weak job
        resumes after the last epoch its sources read (``coordinator.checkpoints.weak``)."""
        if self.weak:
            return weak.consumed_through(self.store, self.job) or None
        return recovery.resolve(self.store, self.job.name, self.restore_from)

    def plan(self, restored: int | None) -> list[EpochPlan]:
        pending = self.store.pending_after(self.job.name, restored or 0)
        if self.max_epochs is not None:
            pending = pending[: self.max_epochs]
        dead = self.source_dead_letters()
        prev_cut = self.store.cut(self.job.name, restored) if restored else {}
        plans = []
        for ck in pending:
            cut = self.store.cut(self.job.name, ck.checkpoint_id)
            plans.append(self._plan_range(prev_cut, cut, ck.checkpoint_id, dead))
            prev_cut = cut
        figures = audit.epoch_dead_letters(self.store.engine, self.job.name, [pl.checkpoint_id for pl in plans])
        return [replace(pl, dead_letters=figures[pl.checkpoint_id]) for pl in plans]

    def plan_range(self, start: dict[str, int], end: dict[str, int], checkpoint_id: int) -> EpochPlan:
        """The records between two cuts, as one epoch (e.g. everything before a cut, for verify)."""
        return self._plan_range(start, end, checkpoint_id, self.source_dead_letters())

    def source_dead_letters(self) -> list[tuple[int, str, int]]:
        """(checkpoint, partition, offset) of the sources' dead letters (inject's: bad lines, duplicate ids),
        which no operator reads. A record an operator made a dead letter (a window's late one: its ``segment``
        is the operator) was dead for that operator alone: a replay or a recomputation reads it again, the
        window finds it late again, and every other operator reading the same source counts it."""
        operators = [s.declaration.operator for s in self.job.sinks if isinstance(s.declaration, DeadLetters)]
        with self.store.sessions() as s:
            return [tuple(row) for row in s.execute(
                select(DeadLetter.checkpoint_id, DeadLetter.partition, DeadLetter.offset).where(
                    DeadLetter.job == self.job.name, DeadLetter.segment.not_in(operators)))]

    def _plan_range(self, start: dict[str, int], end: dict[str, int], checkpoint_id: int, dead) -> EpochPlan:
        segments = self.store.segments_between(self.job.name, start, end)
        offsets = [(p, o) for _, p, o in dead if start.get(p, 0) <= o < end.get(p, 0)]
        return EpochPlan(checkpoint_id, segments, offsets)

    def check_segments(self, plans: list[EpochPlan]) -> None:
        """Every segment an epoch reads is still what inject registered (SourceError, exit 2, naming
        it), before anything runs: a deleted, renamed, truncated, appended or rewritten segment would
        otherwise lose records, count them twice, or fail inside Spark (``coordinator.sources.segment_changes``)."""
        segment_changes.check_before_run(self.input_dir, [(f"of epoch {p.checkpoint_id}", p.segments) for p in plans])

    @property
    def input_dir(self) -> Path:
        return source.input_dir(self.data_dir, self.job.name)

    @cached_property
    def job_row(self):
        """The job's catalog row: its key groups and its incarnation (creation time) are fixed for its life."""
        return self.store.job(self.job.name)

    @property
    def max_parallelism(self) -> int:
        return self.job_row.max_parallelism

    # -- restore -------------------------------------------------------------------
    def restore(self, checkpoint_id: int | None, heads: dict[int, int] | None = None,
                skip: set[str] = frozenset()) -> Restored:
        """Every operator's state at ``checkpoint_id`` (``spark_jobs.run.restore``); ``skip``: operators whose
        stores' tasks load it themselves (their chains are read from the catalog, not their files)."""
        return StateRestorer(self.spark, self.store, self.job, self.flow, self.max_parallelism).restore(
            checkpoint_id, heads, skip)

    def read_state(self, restored: Restored, operator: str) -> DataFrame:
        """An operator's restored state as one DataFrame: as restored, or, where its stores' tasks were to load
        it themselves (skipped), read and checked from its chain now (a restore at another parallelism)."""
        if restored.states.get(operator) is not None:
            return restored.states[operator]
        spec = next(st for st in self.job.states if st.operator == operator)
        return keyed_state.restore(self.spark, self.flow.state_schema(self.spark, operator), spec.key,
                                   restored.links[operator], self.job.parallelism, spec.identity)

    def restore_weak(self, point: int | None, heads: dict[str, int | None], skip: set[str]) -> Restored:
        """A weak job's operators, each at its own head (``spark_jobs.run.restore``)."""
        return StateRestorer(self.spark, self.store, self.job, self.flow, self.max_parallelism).restore_weak(
            point, heads, skip)

    def _of_source(self, name: str, partitions: list):
        """The segments, or (partition, offset) pairs, of source ``name`` (a job with several sources has a
        directory per source)."""
        if len(self.job.sources) == 1:
            return partitions
        return [x for x in partitions
                if (x.partition if isinstance(x, SourceSegment) else x[0]).split("/", 1)[0] == name]

    def read_records(self, plan: EpochPlan) -> dict:
        """The epoch's records of every source, parsed (``spark_jobs.records.record_parsing``)."""
        records = {}
        for name, fmt in self.job.sources:
            segments, dead = self._of_source(name, plan.segments), self._of_source(name, plan.dead_offsets)
            if isinstance(fmt, ParquetFiles):
                lines = read_parquet_epoch(self.spark, self.input_dir, segments, [c for c, _ in fmt.fields], dead)
                if lines is None:
                    lines = self.spark.createDataFrame([], record_schema(fmt, True)).withColumnRenamed(
                        "_partition", "partition").withColumnRenamed("_seq", "seq")
            elif self.flow.needs_sequence_numbers or dead or fmt.checks_each_line:
                lines = read_epoch(self.spark, self.input_dir, segments, fmt, dead)
            else:
                lines = read_lines(self.spark, self.input_dir, segments, fmt)
            records[name] = parse(fmt, lines)
        return records

    def read_together(self, group: list[EpochPlan]) -> tuple[dict, Column, frozenset[str]] | None:
        """The records of the epochs of ``group`` in one scan per source, the column giving a record its epoch
        and the files scanned (``epoch_source.epoch_of_file``); None unless every source is read as plain
        lines (no sequence numbers, no dead letters, no line checks)."""
        if self.flow.needs_sequence_numbers or any(plan.dead_offsets for plan in group) or any(
                isinstance(fmt, ParquetFiles) or fmt.checks_each_line for _, fmt in self.job.sources):
            return None
        tagging = epoch_of_file(self.input_dir, [(plan.checkpoint_id, plan.segments) for plan in group])
        if tagging is None:
            return None
        segments = [s for plan in group for s in plan.segments]
        return {name: parse(fmt, read_lines(self.spark, self.input_dir, self._of_source(name, segments), fmt))
                for name, fmt in self.job.sources}, *tagging

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
        ids = [pl.checkpoint_id for pl in plans]
        self.store.begin_attempt(self.job.name, ids, str(self.mode), keep, definition=self.job,
                                 epoch_starts=dict(zip(ids, [point or 0, *ids[:-1]], strict=True)))
        log(
            f"{self.job.name}: restoring from checkpoint {point or 'none'}, "
            f"{len(plans)} pending epoch(s) {plans[0].checkpoint_id}..{plans[-1].checkpoint_id}, snapshots {self.mode}, "
            f"parallelism {p}" + (f" ({weak.LABEL})" if self.weak else "")
        )
        t0 = time.perf_counter()
        stores = StoreBackend.of(self.spark, self.job, self.flow.nodes, self.state_uri, self.max_parallelism,
                                 incarnation(self.job_row.created_at),
                                 lambda: self.store.store_locations(self.job.name))
        # where each operator's state is: the restore point, or (weak) each operator's own head
        heads = weak.heads(self.store, self.job) if self.weak else point
        # the stores' tasks load their own state from the chains' files: only the chains are read here
        skip = stores.operators if stores is not None else set()
        if restored is None:
            restored = self.restore_weak(point, heads, skip) if self.weak else self.restore(point, skip=skip)
        if self.weak:
            log("  each operator from its own latest snapshot: "
                + ", ".join(f"{op} {'checkpoint ' + str(h) if h else 'empty'}" for op, h in heads.items()))
        states = dict(restored.states)
        if stores is not None:
            states.update(stores.open(heads, restored.links, restored.parallelism, restored.partial,
                                      lambda op: self.read_state(restored, op)))
        back_edge = restored.back_edge
        if back_edge is not None:
            log(f"  feeding back-edge log {point or 0} ({restored.back_edge_records:,} records) to the loop head first")
        report.restore_s = time.perf_counter() - t0
        partitions = source.job_partitions(self.input_dir, self.job.source_names)
        writer = (WeakSnapshotWriter if self.mode is SnapshotMode.WEAK else SnapshotWriter)(
            spark=self.spark,
            store=self.store,
            job=self.job,
            flow=self.flow,
            state_uri=self.state_uri,
            mode=self.mode,
            base=point,
            chain_lengths=dict(restored.chain_lengths),
            full_every=self.store.policy(self.job.name).full_snapshot_every,
            partitions=partitions,
            max_parallelism=self.max_parallelism,
            base_parallelism=restored.parallelism,
            # what the restored chains say about how many keys an epoch changes
            last_full_rows={op: sum(link.rows for link in links if link.full) for op, links in restored.links.items()},
            last_changed_rows=dict.fromkeys(restored.links, self.store.sink_rows(self.job.name, point) if point else 0),
            **({"bases": dict(heads)} if self.mode is SnapshotMode.WEAK else {}),
        )
        try:
            with Steps(len(plans), f"{self.job.name}: epochs") as steps:
                self._run_epochs(plans, restored, states, back_edge, writer, report, steps)
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

    def _run_epochs(self, plans: list[EpochPlan], restored: Restored, states: dict[str, DataFrame],
                    back_edge: DataFrame | None, writer: SnapshotWriter, report: RunReport, steps: Steps) -> None:
        watermarks = dict(restored.watermarks)
        done = 0
        while done < len(plans):
            group = self._together(plans[done:], restored, states, writer)
            if len(group) > 1:
                self._run_together(group, states, watermarks, writer, report, steps, done, len(plans))
            else:
                back_edge = self._run_one(group[0], restored, states, back_edge, watermarks, writer, report, steps,
                                          done + 1, len(plans))
            done += len(group)

    def _together(self, plans: list[EpochPlan], restored: Restored, states: dict[str, DataFrame],
                  writer: SnapshotWriter) -> list[EpochPlan]:
        """The next epochs to run at once (``Dataflow.epochs``): a catch-up of a job whose keyed state is
        all on local stores, every subtask behind them (no partial recovery), up to ``TOGETHER_EPOCHS``
        epochs and ``TOGETHER_RECORDS`` records, and as many as the snapshot writer can take at once."""
        p = self.job.parallelism
        if len(plans) < 2 or self.weak or not self.flow.fusable(states):
            return plans[:1]
        writer.drain()  # the previous epochs' snapshots have read what they read of the stores
        group, records = [], 0
        for plan in plans[: min(TOGETHER_EPOCHS, writer.epochs_at_once())]:
            records += plan.records
            if len(restored.behind(plan.checkpoint_id, p)) < p or (group and records > TOGETHER_RECORDS):
                break
            group.append(plan)
        return group or plans[:1]

    def _run_together(self, group: list[EpochPlan], states: dict[str, DataFrame], watermarks: dict[str, int | None],
                      writer: SnapshotWriter, report: RunReport, steps: Steps, before: int, total: int) -> None:
        t0 = time.perf_counter()
        # an epoch's own reads are planned only if something asks for them (``Dataflow.epoch``)
        records = [(plan.checkpoint_id, _Later(lambda plan=plan: self.read_records(plan))) for plan in group]
        outs = self.flow.epochs(self.spark, states, records, watermarks, self.read_together(group))
        share = (time.perf_counter() - t0) / len(group)
        for k, (plan, out) in enumerate(zip(group, outs, strict=True), before + 1):
            t1 = time.perf_counter()
            fault_point("epoch.compute", plan.checkpoint_id)  # computed; not handed to the snapshot writer yet
            states.update(out.states)
            outputs = {name: df.localCheckpoint(eager=True) for name, df in out.outputs.items()}
            elapsed = share + time.perf_counter() - t1
            metrics = EpochMetrics(plan.checkpoint_id, plan.records, elapsed).count_stores(out.states)
            report.epochs.append(metrics)
            writer.snapshot(plan.checkpoint_id, dict(states), None, outputs=outputs, watermarks=dict(watermarks))
            steps.done(f"  [{k}/{total}] epoch {plan.checkpoint_id}: {plan.records:,} records from "
                       f"{len(plan.segments)} segment(s) in {elapsed:.2f}s (epochs {group[0].checkpoint_id}.."
                       f"{group[-1].checkpoint_id} together)" + plan.dead_letter_note + store_note(metrics))

    def _run_one(self, plan: EpochPlan, restored: Restored, states: dict[str, DataFrame], back_edge: DataFrame | None,
                 watermarks: dict[str, int | None], writer: SnapshotWriter, report: RunReport, steps: Steps,
                 i: int, total: int) -> DataFrame | None:
        """One epoch; the back-edge log it leaves (a job with a loop)."""
        p = self.job.parallelism
        t0 = time.perf_counter()
        if self.mode is SnapshotMode.WEAK:
            writer.consume(plan.checkpoint_id)  # read: no run reads this epoch again
        records = self.read_records(plan)
        fault_point("epoch.compute", plan.checkpoint_id)
        behind = restored.behind(plan.checkpoint_id, p)
        out = self.flow.epoch(self.spark, states, records, back_edge, watermarks, plan.checkpoint_id,
                              self.job.loop_rounds, subtasks=None if len(behind) == p else behind)
        back_edge = out.back_edge
        watermarks.update(out.watermarks)
        for spec in self.job.states:
            new_state = out.states[spec.operator]  # materialized by the operator (an immutable copy)
            if len(behind) < p and not isinstance(new_state, StoreState):
                # partial recovery: subtasks already past this epoch keep their state and discard its records
                mine = keyed_state.subtask_of(spec.key, p, self.max_parallelism).isin(sorted(behind))
                new_state = new_state.where(mine).unionByName(states[spec.operator].where(~mine))
                new_state = new_state.localCheckpoint(eager=True)
            states[spec.operator] = new_state
        outputs = {name: df.localCheckpoint(eager=True) for name, df in out.outputs.items()}
        elapsed = time.perf_counter() - t0
        metrics = EpochMetrics(plan.checkpoint_id, plan.records, elapsed).count_stores(states)
        report.epochs.append(metrics)
        writer.snapshot(plan.checkpoint_id, dict(states), None if len(behind) == p else behind,
                        back_edge=back_edge, outputs=outputs, watermarks=dict(watermarks))
        steps.done(
            f"  [{i}/{total}] epoch {plan.checkpoint_id}: {plan.records:,} records "
            f"from {len(plan.segments)} segment(s) in {elapsed:.2f}s"
            + ("" if len(behind) == p else f" (subtasks {sorted(behind)} only)") + plan.dead_letter_note
            + store_note(metrics)
        )
        return back_edge
