"""The epoch runner: restore, then process every pending epoch in order, in one application.

1. restore the keyed state of the last completed checkpoint (or the one asked for), each
   operator's in its engine (``spark_jobs.state.backend``, chosen by ``spark_jobs.run.engines``);
2. for each pending barrier n: read epoch n from every source partition, apply it (the
   operators, each state giving an immutable state n), take its snapshot's synchronous
   phase, hand it to the snapshot writer, and go on with epoch n+1.

The run's modes are one strategy object (``spark_jobs.run.strategy``), built with the run.

Epoch n holds the records between the previous processed barrier's cut and
barrier n's cut, so a failed checkpoint's records simply belong to the next one.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from collections.abc import Callable, Iterator, Mapping
from functools import cache, cached_property
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from coordinator.checkpoints import run_plan
from coordinator.checkpoints.run_plan import EpochPlan, RunPlan
from coordinator.sources import delta_source, kafka_source, kinds, segment_changes, source
from coordinator.faults import fault_point
from coordinator.catalog import epochs as catalog_epochs
from coordinator.modes import SnapshotMode
from coordinator.catalog.models import SourceSegment
from coordinator.dataflow.jobs import JobDefinition
from coordinator.checkpoints.store import CheckpointStore
from coordinator.sources.delta_source import DeltaSource
from coordinator.sources.record_formats import ParquetFiles
from spark_jobs.state import keyed_state
from spark_jobs.operators import ttl
from spark_jobs.operators.dataflow import dataflow_of
from spark_jobs.operators.keyed_operators import materialized
from spark_jobs.records.delta_epochs import read_delta_epoch
from spark_jobs.records.kafka_epochs import read_kafka_epoch
from spark_jobs.records.epoch_source import RECORD_SCHEMA, epoch_of_file, read_epoch, read_lines, read_parquet_epoch
from spark_jobs.run.progress import Steps
from spark_jobs.records.record_parsing import parse, record_schema
from spark_jobs.run.restore import Restored, StateRestorer
from spark_jobs.run import engines
from spark_jobs.run.snapshot import SnapshotTiming, SnapshotWriter
from spark_jobs.run.strategy import RunStrategy
from spark_jobs.state.backend import KeyedState, RestorePoint
from spark_jobs.state.stores.provider import incarnation


@dataclass
class EpochMetrics:
    checkpoint_id: int
    records: int
    process_s: float
    state_rows: int = 0
    #: how its tasks found their states (``KeyedState.task_loads``): hits, reloads, the longest reload's seconds
    store_hits: int = 0
    store_reloads: int = 0
    store_reload_s: float = 0.0

    def count_stores(self, states: Mapping[str, KeyedState]) -> EpochMetrics:
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


def store_loads(states: Mapping[str, KeyedState]) -> list[tuple[str, float]]:
    """How an epoch's tasks found their states (``KeyedState.task_loads``): ("hit" | "reload", seconds) each;
    none for an epoch that ran no such task (a group's later epochs: its first reports the group's)."""
    return [v[:2] for st in states.values() for v in st.task_loads.values()]


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
        plan: RunPlan | None = None,
    ) -> None:
        """``plan``: what the run does, read already (``coordinator.checkpoints.run_plan``, under the job's
        lease); else ``run`` reads it, from ``restore_from`` (else the latest completed checkpoint)."""
        self.spark = spark
        self.store = store
        self.job = job
        self.flow = dataflow_of(job)
        self.data_dir = data_dir
        self.state_uri = state_uri
        self.strategy = RunStrategy(mode, job.consistency)
        self.restore_from = restore_from
        self.max_epochs = max_epochs
        self.given_plan = plan

    # -- planning ------------------------------------------------------------------
    def read_plan(self, restored: Restored | None = None) -> RunPlan:
        """The run's plan (``coordinator.checkpoints.run_plan``): the one handed in, else read now; after a
        recovery's restore (``restored``), the epochs after the checkpoint it restored."""
        if self.given_plan is not None:
            return self.given_plan
        return run_plan.read(self.store, self.job, self.restore_from, self.max_epochs,
                             restored=None if restored is None else restored.checkpoint_id or 0)

    def plan_range(self, start: dict[str, int], end: dict[str, int], checkpoint_id: int) -> EpochPlan:
        """The records between two cuts, as one epoch (e.g. everything before a cut, for verify)."""
        return run_plan.epoch_between(run_plan.segments_of(self.store, self.job.name),
                                      run_plan.source_dead_letters(self.store, self.job), start, end, checkpoint_id)

    def check_segments(self, plans: list[EpochPlan]) -> None:
        """Every segment an epoch reads is still what inject registered (SourceError, exit 2, naming
        it), before anything runs: a deleted, renamed, truncated, appended or rewritten segment would
        otherwise lose records, count them twice, or fail inside Spark (``coordinator.sources.segment_changes``)."""
        self.check_reads([(f"of epoch {p.checkpoint_id}", p.segments) for p in plans])

    def check_reads(self, reads: list[tuple[str, list[SourceSegment]]]) -> None:
        """``reads``: (what reads them, the segments): segment files (``segment_changes``) and Delta versions
        (``delta_source``) are each as registered, or SourceError names the first that is not."""
        segment_changes.check_before_run(self.job, self.input_dir,
                                         [(why, kinds.file_segments(self.job, segments))
                                          for why, segments in reads])
        delta_source.check_before_run(self.job, reads)
        kafka_source.check_before_run(self.job, reads)

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
            if isinstance(fmt, kafka_source.KafkaSource):
                lines = read_kafka_epoch(self.spark, fmt, segments, dead)
                if lines is None:
                    lines = self.spark.createDataFrame([], RECORD_SCHEMA)
                records[name] = parse(fmt, lines)
                continue
            if isinstance(fmt, ParquetFiles):
                lines = read_delta_epoch(self.spark, fmt, segments, dead) if isinstance(fmt, DeltaSource) else \
                    read_parquet_epoch(self.spark, self.input_dir, segments, [c for c, _ in fmt.fields], dead)
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
                isinstance(fmt, ParquetFiles | kafka_source.KafkaSource) or fmt.checks_each_line
                for _, fmt in self.job.sources):
            return None
        tagging = epoch_of_file(self.input_dir, [(plan.checkpoint_id, plan.segments) for plan in group])
        if tagging is None:
            return None
        segments = [s for plan in group for s in plan.segments]
        return {name: parse(fmt, read_lines(self.spark, self.input_dir, self._of_source(name, segments), fmt))
                for name, fmt in self.job.sources}, *tagging

    # -- the loop --------------------------------------------------------------------
    def run(self, restored: Restored | None = None) -> RunReport:
        """Restore, then for each pending epoch after the restore point: apply, snapshot, hand over.
        ``restored``: state already restored (and verified) by a recovery."""
        t_start = time.perf_counter()
        run = self.read_plan(restored)
        report = RunReport(restored_from=run.restore_point)
        if not run.epochs:
            log(f"{self.job.name}: no pending epochs after checkpoint {run.restore_point or 0}")
            return report
        self._begin(run, restored)
        t0 = time.perf_counter()
        restored, states = self._open(run, restored)
        report.restore_s = time.perf_counter() - t0
        writer = self._writer(run, restored)
        try:
            with Steps(len(run.epochs), f"{self.job.name}: epochs") as steps:
                self._run_epochs(run.epochs, restored, states, writer, report, steps)
        except Exception:
            # a segment deleted or changed while this run read it: name it rather than Spark's traceback
            self.check_segments(run.epochs)
            raise
        finally:
            report.snapshots = writer.close()
        report.total_s = time.perf_counter() - t_start
        for t in report.failed:
            log(f"  checkpoint {t.checkpoint_id} FAILED: {t.error}")
        return report

    def _begin(self, run: RunPlan, restored: Restored | None) -> None:
        """The run's attempt at its epochs in the catalog, once its segments are checked; ``restored``: a
        partial recovery's, whose subtasks past an epoch keep their ack of it."""
        plans, p = run.epochs, self.job.parallelism
        self.check_segments(plans)
        keep = {} if restored is None else {
            plan.checkpoint_id: set(range(p)) - restored.behind(plan.checkpoint_id, p) for plan in plans
        }
        self.store.begin_attempt(self.job.name, [pl.checkpoint_id for pl in plans], self.strategy.recorded, keep,
                                 definition=self.job, epoch_starts=run.epoch_starts)
        log(f"{self.job.name}: restoring from checkpoint {run.restore_point or 'none'}, {len(plans)} pending "
            f"epoch(s) {plans[0].checkpoint_id}..{plans[-1].checkpoint_id}, snapshots {self.strategy.recorded}, "
            f"parallelism {p}" + self.strategy.label)

    def _open(self, run: RunPlan, restored: Restored | None) -> tuple[Restored, dict[str, KeyedState]]:
        """Every operator's state at the restore point, each in its engine (``restored``: a recovery's,
        restored already), and the state TTL's lineage."""
        point, heads = run.restore_point, self.strategy.heads(run)
        backends = engines.backends_of(self.spark, self.job, self.flow.nodes, self.state_uri, self.max_parallelism,
                                       incarnation(self.job_row.created_at),
                                       lambda: self.store.store_locations(self.job.name))
        # an engine whose tasks load their state from the chains' files: only the chains are read here
        skip = set().union(*(backend.reads_own_files for backend in backends))
        if restored is None:
            restored = self.restore_weak(point, heads, skip) if self.strategy.per_operator else \
                self.restore(point, skip=skip)
        if self.strategy.per_operator:
            log("  each operator from its own latest snapshot: "
                + ", ".join(f"{op} {'checkpoint ' + str(h) if h else 'empty'}" for op, h in heads.items()))
        at = RestorePoint(heads, restored.links, restored.parallelism, restored.partial, restored.states,
                          lambda op: self.read_state(restored, op))
        opened = {op: st for backend in backends for op, st in backend.open(at).items()}
        if restored.back_edge is not None:
            log(f"  feeding back-edge log {point or 0} ({restored.back_edge_records:,} records) to the loop head first")
        # a state TTL counts epochs along the restore point's lineage (``coordinator.dataflow.ttl``)
        self.flow.expiry.start(catalog_epochs.lineage(self.store, self.job.name, point) if ttl.counts_epochs(
            self.flow.spec.nodes) else [], self.max_parallelism)
        return restored, {spec.operator: opened[spec.operator] for spec in self.job.states}

    def _writer(self, run: RunPlan, restored: Restored) -> SnapshotWriter:
        """The snapshot writer of the run's epochs, on the restored chains: what they say of how many keys an
        epoch changes chooses each next snapshot full or incremental."""
        partitions = source.job_partitions(self.input_dir, self.job.source_names) + list(
            delta_source.partitions_of(self.job)) + sorted({
                seg.partition for plan in run.epochs for seg in plan.segments
                if kafka_source.is_kafka_partition(self.job, seg.partition)})
        return self.strategy.writer(
            self.strategy.heads(run), spark=self.spark, store=self.store, job=self.job, flow=self.flow,
            state_uri=self.state_uri, base=run.restore_point, chain_lengths=dict(restored.chain_lengths),
            full_every=run.full_snapshot_every, partitions=partitions, max_parallelism=self.max_parallelism,
            base_parallelism=restored.parallelism,
            last_full_rows={op: sum(link.rows for link in links if link.full) for op, links in restored.links.items()},
            last_changed_rows=dict.fromkeys(restored.links, run.changed_rows_at_point))

    def _run_epochs(self, plans: list[EpochPlan], restored: Restored, states: dict[str, KeyedState],
                    writer: SnapshotWriter, report: RunReport, steps: Steps) -> None:
        watermarks, back_edge = dict(restored.watermarks), restored.back_edge
        done = 0
        while done < len(plans):
            group = self._together(plans[done:], restored, states, writer)
            if len(group) > 1:
                self._run_together(group, states, watermarks, writer, report, steps, done, len(plans))
            else:
                back_edge = self._run_one(group[0], restored, states, back_edge, watermarks, writer, report, steps,
                                          done + 1, len(plans))
            done += len(group)

    def _together(self, plans: list[EpochPlan], restored: Restored, states: dict[str, KeyedState],
                  writer: SnapshotWriter) -> list[EpochPlan]:
        """The next epochs to run at once (``Dataflow.epochs``): a catch-up of a job whose keyed state is
        all in engines that fold epochs together (``Dataflow.fusable``), every subtask behind them (no partial
        recovery), up to ``TOGETHER_EPOCHS`` epochs and ``TOGETHER_RECORDS`` records, and as many as the
        snapshot writer can take at once."""
        p = self.job.parallelism
        if len(plans) < 2 or self.strategy.per_operator or not self.flow.fusable(states):
            return plans[:1]
        writer.drain()  # the previous epochs' snapshots have read what they read of the stores
        group, records = [], 0
        kept = min(state.versions_kept for state in states.values())
        for plan in plans[: min(TOGETHER_EPOCHS, writer.epochs_at_once(kept))]:
            records += plan.records
            if len(restored.behind(plan.checkpoint_id, p)) < p or (group and records > TOGETHER_RECORDS):
                break
            group.append(plan)
        return group or plans[:1]

    def _run_together(self, group: list[EpochPlan], states: dict[str, KeyedState], watermarks: dict[str, int | None],
                      writer: SnapshotWriter, report: RunReport, steps: Steps, before: int, total: int) -> None:
        t0 = time.perf_counter()
        # an epoch's own reads are planned only if something asks for them (``Dataflow.epoch``)
        records = [(plan.checkpoint_id, _Later(lambda plan=plan: self.read_records(plan))) for plan in group]
        outs = self.flow.epochs(self.spark, states, records, watermarks, self.read_together(group),
                                sum(plan.records for plan in group))
        share = (time.perf_counter() - t0) / len(group)
        for k, (plan, out) in enumerate(zip(group, outs, strict=True), before + 1):
            t1 = time.perf_counter()
            fault_point("epoch.compute", plan.checkpoint_id)  # computed; not handed to the snapshot writer yet
            states.update(out.states)
            outputs = {name: materialized(df, False) for name, df in out.outputs.items()}
            elapsed = share + time.perf_counter() - t1
            metrics = EpochMetrics(plan.checkpoint_id, plan.records, elapsed).count_stores(out.states)
            report.epochs.append(metrics)
            writer.snapshot(plan.checkpoint_id, dict(states), None, outputs=outputs, watermarks=dict(watermarks))
            steps.done(f"  [{k}/{total}] epoch {plan.checkpoint_id}: {plan.records:,} records from "
                       f"{len(plan.segments)} segment(s) in {elapsed:.2f}s (epochs {group[0].checkpoint_id}.."
                       f"{group[-1].checkpoint_id} together)" + plan.dead_letter_note + store_note(metrics))

    def _run_one(self, plan: EpochPlan, restored: Restored, states: dict[str, KeyedState], back_edge: DataFrame | None,
                 watermarks: dict[str, int | None], writer: SnapshotWriter, report: RunReport, steps: Steps,
                 i: int, total: int) -> DataFrame | None:
        """One epoch; the back-edge log it leaves (a job with a loop)."""
        p = self.job.parallelism
        t0 = time.perf_counter()
        self.strategy.read(writer, plan.checkpoint_id)
        records = self.read_records(plan)
        fault_point("epoch.compute", plan.checkpoint_id)
        behind = restored.behind(plan.checkpoint_id, p)
        self.flow.durable = self.strategy.durable(writer)  # tombstones a durable snapshot holds leave the state
        out = self.flow.epoch(self.spark, states, records, back_edge, watermarks, plan.checkpoint_id,
                              self.job.loop_rounds, subtasks=None if len(behind) == p else behind,
                              volume=plan.records)
        back_edge = out.back_edge
        watermarks.update(out.watermarks)
        for spec in self.job.states:
            new_state = out.states[spec.operator]  # immutable: each engine's state n
            if len(behind) < p:  # partial recovery: subtasks already past this epoch keep their state
                new_state = new_state.keep_past(states[spec.operator], behind, spec.key, p, self.max_parallelism)
            states[spec.operator] = new_state
        outputs = {name: materialized(df, False) for name, df in out.outputs.items()}
        dropped = self.flow.expiry.finish(plan.checkpoint_id)
        elapsed = time.perf_counter() - t0
        metrics = EpochMetrics(plan.checkpoint_id, plan.records, elapsed).count_stores(states)
        report.epochs.append(metrics)
        writer.snapshot(plan.checkpoint_id, dict(states), None if len(behind) == p else behind,
                        back_edge=back_edge, outputs=outputs, watermarks=dict(watermarks), dropped=dropped)
        steps.done(
            f"  [{i}/{total}] epoch {plan.checkpoint_id}: {plan.records:,} records "
            f"from {len(plan.segments)} segment(s) in {elapsed:.2f}s"
            + ("" if len(behind) == p else f" (subtasks {sorted(behind)} only)") + plan.dead_letter_note
            + store_note(metrics)
        )
        return back_edge
