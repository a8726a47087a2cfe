"""Two-phase snapshots of epoch state, and the task acks that end them.

After epoch n the runner holds every stateful operator's state n as an
immutable, locally checkpointed DataFrame, and each sink's output of the epoch
(the synchronous phase: nothing else is copied). The asynchronous phase writes
one set of Parquet files per operator and checkpoint under
``chk-n/<operator>/subtask=<i>/``: every row (a full snapshot) or the rows
changed since the base checkpoint (incremental; a key that left the state is a
changed row, its tombstone; a window's or a join's delta is taken against the state of its
base, ``spark_jobs.state.frames.state_diff``). A sink fed by a keyed operator's changes
stages those same files (its rows with updated > base), so that output is
written once; any other sink's output is written under ``chk-n/<sink>/``, with
the output of epochs whose checkpoint failed since the last durable one (it
belongs to the next transaction). Rows and checksums per subtask are observed
during the writes, then the sink transactions are staged and every task acks.
A keyed aggregate on local stores (``spark_jobs.state.stores.provider``) has its delta
written by the epoch's own tasks; its asynchronous phase seals and acks it.

Modes (per run): ``async`` runs the write on a writer thread while epoch n+1
proceeds (ABS); ``sync`` runs it before epoch n+1 starts (the stop-the-world
snapshot the paper compares against); ``none`` writes no state: the sink's
output is upserted straight into its table (at-least-once) and the checkpoint
is declined with SNAPSHOT_DISABLED, the overhead baseline. ``weak`` (a job declared
``consistency="weak"``): ``spark_jobs.run.weak_snapshots``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from coordinator.checkpoints import manifests, state_files
from coordinator.sinks import transactions as sinks
from coordinator.sinks.deletes import DELETE
from coordinator.errors import FencedError
from coordinator.faults import fault_point
from coordinator.dataflow.graph import OperatorKind
from coordinator.dataflow.jobs import JobDefinition, SinkSpec, StateSpec
from coordinator.checkpoints.lifecycle import AckResult, FailureReason
from coordinator.modes import SnapshotMode
from coordinator.sources.source import source_subtask
from coordinator.checkpoints.store import CheckpointStore
from coordinator.checkpoints.state_handle import StateHandle
from spark_jobs.run import back_edge_log
from spark_jobs.operators.dataflow import Dataflow
from spark_jobs.state.backend import KeyedState, Snapshot, SnapshotTarget


@dataclass(frozen=True)
class Epoch:
    """What the runner hands over after an epoch: immutable snapshots and frames, and the epoch's facts."""

    states: dict[str, Snapshot]
    outputs: dict[str, DataFrame]
    watermarks: dict[str, int | None]
    #: snapshot and ack only these subtasks (partial recovery); None: all
    subtasks: frozenset[int] | None
    back_edge: DataFrame | None
    #: operator -> subtask -> keys its state TTL dropped in the epoch (``spark_jobs.operators.ttl``)
    dropped: dict[str, dict[int, int]] = field(default_factory=dict)


@dataclass
class SnapshotTiming:
    checkpoint_id: int
    sync_ms: int = 0
    async_ms: int = 0
    state_rows: int = 0
    state_bytes: int = 0
    sink_rows: int = 0
    full: bool = True
    error: str | None = None
    #: jobs with a loop: back-edge log n, written with the state
    back_edge_records: int = 0
    back_edge_bytes: int = 0
    back_edge_ms: int = 0


@dataclass
class SnapshotWriter:
    spark: SparkSession
    store: CheckpointStore
    job: JobDefinition
    flow: Dataflow
    state_uri: str
    mode: SnapshotMode
    #: the last checkpoint whose snapshot is durable (the base of the next incremental one)
    base: int | None
    #: operator -> snapshots since its last full one, counting ``base`` itself
    chain_lengths: dict[str, int]
    full_every: int
    partitions: list[str]
    #: the job's key groups (``keyed_state.subtask_of``)
    max_parallelism: int
    #: the parallelism ``base`` was taken at (None: unknown): a snapshot at another one is full,
    #: since a delta of a subtask would chain onto a base holding other keys
    base_parallelism: int | None = None
    max_in_flight: int = 2
    #: operator -> rows of its newest full snapshot, and changed rows of its newest snapshot (for the
    #: full/incremental choice)
    last_full_rows: dict[str, int] = field(default_factory=dict)
    last_changed_rows: dict[str, int] = field(default_factory=dict)
    timings: list[SnapshotTiming] = field(default_factory=list)

    #: sinks fed by a keyed operator stage its snapshot files (``weak_snapshots``: written directly)
    stages_sinks = True

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="abs-snapshot")
        self._in_flight: list[Future] = []
        #: the writer thread died of something that is not an error (the process is going down):
        #: no later snapshot may be written or acked after the one it interrupted
        self._halted = False
        #: operator -> the manifest of its snapshot being written (the writer thread's alone)
        self._manifests: dict[str, manifests.Manifest] = {}
        #: the run lost its lease: the next epoch must not start
        self._fenced: FencedError | None = None
        #: sink -> outputs of epochs since the last durable checkpoint (the writer thread's alone)
        self._carry: dict[str, list[DataFrame]] = {}

    def snapshot(self, checkpoint_id: int, states: dict[str, KeyedState], subtasks: frozenset[int] | None = None,
                 back_edge: DataFrame | None = None, outputs: dict[str, DataFrame] | None = None,
                 watermarks: dict[str, int | None] | None = None,
                 dropped: dict[str, dict[int, int]] | None = None) -> None:
        """Take snapshot n of ``states`` with the epoch's sink ``outputs`` (immutable) and window
        ``watermarks``. Returns once the synchronous phase is over (``KeyedState.snapshot``).

        ``subtasks``: snapshot and ack only these subtasks (a partial recovery: the others
        acked checkpoint n before the failure and keep their files). ``back_edge``: back-edge
        log n of a job with a loop (immutable), written and recorded with the acks. ``dropped``: the keys
        each operator's state TTL dropped, per subtask (acked as ``keys_dropped``)."""
        if self._fenced is not None:
            raise self._fenced
        t0 = time.perf_counter()
        timing = SnapshotTiming(checkpoint_id)
        self.timings.append(timing)
        snapshots = {op: state.snapshot(checkpoint_id) for op, state in states.items()}
        self._take(checkpoint_id, Epoch(snapshots, outputs or {}, watermarks or {}, subtasks, back_edge,
                                        dropped or {}), timing, t0)

    def _take(self, checkpoint_id: int, epoch: Epoch, timing: SnapshotTiming, t0: float) -> None:
        """The snapshot of ``epoch`` in this writer's mode; ``t0``: when the synchronous phase began."""
        if self.mode is SnapshotMode.NONE:
            self._write_sink_directly(checkpoint_id, epoch, timing)
            self.store.fail(self.job.name, checkpoint_id, FailureReason.SNAPSHOT_DISABLED,
                            "run with --snapshot-mode none")
        elif self.mode is SnapshotMode.SYNC:
            self._write_and_ack(checkpoint_id, epoch, timing, True)
        else:
            self._in_background(t0, timing, self._write_and_ack, checkpoint_id, epoch, timing, False)

    def _in_background(self, t0: float, timing: SnapshotTiming, write: Callable[..., None], *args: object) -> None:
        """Hand ``write(*args)`` to the writer thread once fewer than ``max_in_flight`` snapshots are being
        written (back-pressure: epoch n+1 waits); the time until then is the synchronous phase."""
        while len(self._in_flight) >= self.max_in_flight:
            self._in_flight.pop(0).result()
        timing.sync_ms = int((time.perf_counter() - t0) * 1000)
        self._in_flight.append(self._pool.submit(write, *args))

    def drain(self) -> None:
        """Wait until every snapshot handed over is written (or has failed)."""
        while self._in_flight:
            self._in_flight.pop(0).result()

    def close(self) -> list[SnapshotTiming]:
        for fut in self._in_flight:
            fut.result()
        self._pool.shutdown(wait=True)
        return self.timings

    # -- phases --------------------------------------------------------------------
    def _write_sink_directly(self, checkpoint_id: int, epoch: Epoch, timing: SnapshotTiming) -> None:
        """The epoch's output upserted straight into each sink (``self.base``: the previous epoch's)."""
        with self.store.sessions.begin() as s:
            self.store.lock_job(s, self.job.name)
            for sink in self.job.sinks:
                cols = list(sink.column_names)
                if sink.from_state:
                    changed = epoch.states[sink.input].state.rows(self.spark, self.base)
                    rows = changed.select(*cols, *[c for c in changed.columns if c == DELETE]).toArrow()
                else:
                    rows = epoch.outputs[sink.name].select(*cols).toArrow()
                sinks.write(s, sink, self.job.name, checkpoint_id, rows)
                timing.sink_rows += rows.num_rows
        self.base, self.base_parallelism = checkpoint_id, self.job.parallelism

    def _write_and_ack(self, checkpoint_id: int, epoch: Epoch, timing: SnapshotTiming, stop_the_world: bool) -> None:
        if self._halted:
            return
        t0 = time.perf_counter()
        carried = {name: [*self._carry.get(name, []), out] for name, out in epoch.outputs.items()}
        try:
            handles, fulls = self._write(checkpoint_id, epoch, carried, timing)
            back_edge, subtasks = epoch.back_edge, epoch.subtasks
            logs = None if back_edge is None else self._write_back_edge_log(checkpoint_id, back_edge, timing, subtasks)
            write_ms = int((time.perf_counter() - t0) * 1000)
            if stop_the_world:
                timing.sync_ms = write_ms
            else:
                timing.async_ms = write_ms
            handles = [replace(h, sync_ms=timing.sync_ms, async_ms=timing.async_ms) for h in handles]
            fault_point("snapshot.before_ack", checkpoint_id)
            refused = self._ack(checkpoint_id, handles, logs)
            if refused:
                # failed meanwhile (e.g. expired by a finalize): not a base for the next snapshot, whose
                # delta must also hold this epoch's changes; its files are garbage
                timing.error = f"checkpoint {checkpoint_id} was failed while its snapshot was written: acks {refused}"
                self._carry = carried
                return
        except FencedError as exc:
            # another run owns the job now: this one must not write anything more, not even a decline
            self._halted, self._fenced = True, exc
            raise
        except Exception as exc:  # the checkpoint fails; processing goes on
            timing.error = f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            for snap in epoch.states.values():  # a lost executor may have held a base's rows: the next are full
                snap.state.forget_bases()
            self._carry = carried
            self.store.fail(
                self.job.name, checkpoint_id, FailureReason.ASYNC_SNAPSHOT_FAILED,
                timing.error + "\n" + traceback.format_exc(limit=5),
            )
            return
        except BaseException:
            self._halted = True
            raise
        self._carry = {}
        self.base, self.base_parallelism = checkpoint_id, self.job.parallelism
        for op, full in fulls.items():
            self.chain_lengths[op] = 1 if full else self.chain_lengths.get(op, 0) + 1

    def _ack(self, checkpoint_id: int, handles: list[StateHandle],
             logs: list[back_edge_log.BackEdgeLogHandle] | None = None) -> list[str]:
        """Each subtask index acks on its own (its operators' instances together, one transaction),
        as separate tasks would: a crash can leave k of N acked. A loop tail's subtask records its
        part of the back-edge log in the transaction of its ack.

        Returns the acks the catalog did not accept (DISCARDED: the checkpoint failed meanwhile;
        UNKNOWN), as sorted names; empty when every ack counted (SUCCESS, or DUPLICATE on a retry)."""
        refused: set[str] = set()
        groups = sorted({h.subtask for h in handles})
        for k, i in enumerate(groups, 1):
            mine = [h for h in handles if h.subtask == i]
            if logs is None:
                results = self.store.ack_many(self.job.name, checkpoint_id, mine)
            else:
                part = [log for log in logs if log.subtask == i]
                results = self.store.ack_many_with_back_edge_logs(self.job.name, checkpoint_id, mine, part)
            refused |= {str(r) for r in results if r not in (AckResult.SUCCESS, AckResult.DUPLICATE)}
            if k < len(groups):
                fault_point("snapshot.after_ack", checkpoint_id, k)
        return sorted(refused)

    def _write_back_edge_log(self, checkpoint_id: int, back_edge: DataFrame, timing: SnapshotTiming,
                             subtasks: frozenset[int] | None) -> list[back_edge_log.BackEdgeLogHandle]:
        t0 = time.perf_counter()
        logs = back_edge_log.write(self.spark, back_edge, self.job, self.flow, self.state_uri, checkpoint_id,
                                   self.max_parallelism)
        manifests.make_durable(state_files.operator_dir(self.state_uri, self.job.name, checkpoint_id,
                                                        self.job.loop_tail), self._job_root)
        timing.back_edge_ms = int((time.perf_counter() - t0) * 1000)
        if subtasks is not None:
            logs = [log for log in logs if log.subtask in subtasks]
        timing.back_edge_records = sum(log.records for log in logs)
        timing.back_edge_bytes = sum(log.bytes for log in logs)
        return logs

    def _write(self, checkpoint_id: int, epoch: Epoch, carried: dict[str, list[DataFrame]],
               timing: SnapshotTiming) -> tuple[list[StateHandle], dict[str, bool]]:
        handles = self._stateless_handles()
        fulls: dict[str, bool] = {}
        changed: dict[str, int] = {}
        for spec in self.job.states:
            written, fulls[spec.operator], changed[spec.operator] = self._write_state(
                checkpoint_id, spec, epoch.states[spec.operator], epoch, timing, self.base)
            handles += written
        staged = [self._stage_output(checkpoint_id, sink, carried[sink.name]) for sink in self.job.sinks
                  if not sink.from_state]
        with self.store.sessions.begin() as s:
            self.store.lock_job(s, self.job.name)
            for sink in self.job.sinks:
                if sink.from_state:
                    uri = self._op_uri(checkpoint_id, sink.input)
                    manifest = self._manifests[sink.input]
                    sinks.stage(s, self.job.name, sink.name, checkpoint_id, uri, self.base, changed[sink.input],
                                manifest)
                else:
                    uri, rows, manifest = next(x for x in staged if x[0] == sink.name)[1:]
                    sinks.stage(s, self.job.name, sink.name, checkpoint_id, uri, None, rows, manifest)
        p = self.job.parallelism
        for sink in self.job.sinks:
            uri = self._op_uri(checkpoint_id, sink.input if sink.from_state else sink.name)
            handles += [StateHandle(operator=sink.name, subtask=i, state_uri=uri) for i in range(p)]
        if epoch.subtasks is not None:
            handles = [h for h in handles if h.subtask in epoch.subtasks]
        timing.full = all(fulls.values())
        timing.state_bytes = sum(h.state_bytes for h in handles)
        return handles, fulls

    def _op_uri(self, checkpoint_id: int, operator: str) -> str:
        return state_files.operator_dir(self.state_uri, self.job.name, checkpoint_id, operator)

    def _write_state(self, checkpoint_id: int, spec: StateSpec, snapshot: Snapshot, epoch: Epoch,
                     timing: SnapshotTiming, base: int | None) -> tuple[list[StateHandle], bool, int]:
        """One operator's snapshot, incremental on ``base`` unless full (``Snapshot.write``): its files, sealed,
        and its subtasks' handles."""
        op = spec.operator
        full = self._next_is_full(spec, snapshot.state, base)
        written = snapshot.write(SnapshotTarget(
            self.spark, spec, checkpoint_id, self._op_uri(checkpoint_id, op), self._job_root, full, base,
            self.job.parallelism, self.max_parallelism, epoch.subtasks, epoch.watermarks.get(op),
            epoch.dropped.get(op, {})))
        self._manifests[op] = written.manifest
        if full:
            self.last_full_rows[op] = written.rows
        self.last_changed_rows[op] = written.changed
        timing.state_rows += written.rows
        if self.stages_sinks and any(sink.from_state and sink.input == op for sink in self.job.sinks):
            timing.sink_rows += written.changed
        return written.handles, full, written.changed

    def _stage_output(self, checkpoint_id: int, sink: SinkSpec, outputs: list[DataFrame]
                      ) -> tuple[str, str, int, manifests.Manifest]:
        """A sink's output since the last durable checkpoint, written under ``chk-n/<sink>/`` and sealed."""
        rows = outputs[0]
        for more in outputs[1:]:
            rows = rows.unionByName(more)
        uri = self._op_uri(checkpoint_id, sink.name)
        observation = Observation(f"stage-{checkpoint_id}-{sink.name}")
        rows = rows.select(*sink.column_names, F.lit(checkpoint_id).cast("long").alias("updated"))
        rows.observe(observation, F.count(F.lit(1)).alias("n")).coalesce(1).write.mode("overwrite").parquet(uri)
        manifest = manifests.seal(uri, self._job_root)
        count = int(observation.get["n"] or 0)
        return sink.name, uri, count, manifest

    @property
    def _job_root(self) -> str:
        return f"{state_files.spark_uri(self.state_uri)}/{self.job.name}"

    def _next_is_full(self, spec: StateSpec, state: KeyedState, base: int | None) -> bool:
        """Full for an operator that deletes rows, on the first snapshot, every ``full_every``, after a
        change of parallelism, and where its engine prefers it (``KeyedState.prefers_full``)."""
        op = spec.operator
        if (not spec.incremental or base is None or self.chain_lengths.get(op, 0) >= self.full_every
                or self.base_parallelism != self.job.parallelism):
            return True
        return state.prefers_full(spec, base, self.last_changed_rows.get(op, 0), self.last_full_rows.get(op, 0))

    def epochs_at_once(self, versions_kept: int) -> int:
        """How many next epochs a catch-up may apply at once (``Dataflow.epochs``), ``drain``-ed first: their
        snapshots, each succeeding, read the states only as of versions their engine still keeps
        (``versions_kept``, ``KeyedState.versions_kept``). A delta is the epoch's changes, the first snapshot
        from empty states seals them, and a full one reads the states whole."""
        if self.mode is SnapshotMode.NONE:  # no snapshot: the sinks take each epoch's changes
            return 1 << 30
        first_read = []
        for spec in self.job.states:
            if not spec.incremental or (self.base is not None and self.base_parallelism != self.job.parallelism):
                first_read.append(1)
            elif self.base is None:  # the first, sealed, then full_every - 1 deltas, then a full one
                first_read.append(self.full_every + 1)
            else:
                first_read.append(max(1, self.full_every - self.chain_lengths.get(spec.operator, 0) + 1))
        return min(first_read, default=1) + versions_kept - 1

    def _stateless_handles(self) -> list[StateHandle]:
        """A source subtask acks the partitions it reads (their offsets are the catalog's cut); a stateless
        operator acks that it holds nothing."""
        stateful = {st.operator for st in self.job.states} | set(self.job.sink_operators)
        many = len(self.job.sources) > 1
        handles = []
        for op in self.job.graph.operators:
            if op.name in stateful:
                continue
            mine = [part for part in self.partitions if not many or part.split("/", 1)[0] == op.name]
            for i in range(op.parallelism):
                owned = sum(1 for part in mine if source_subtask(part, op.parallelism) == i)
                rows = owned if op.kind is OperatorKind.SOURCE else 0
                handles.append(StateHandle(operator=op.name, subtask=i, state_rows=rows))
        return handles
