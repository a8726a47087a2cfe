"""Two-phase snapshots of epoch state, and the task acks that end them.

After epoch n the runner holds state n as an immutable, locally checkpointed
DataFrame. The synchronous phase only decides what to write (full or
incremental, against which base); the asynchronous phase writes the keyed
state as Parquet, stages the sink's output (pre-commit) and acks every task.

Modes (per run): ``async`` runs the second phase on a writer thread while
epoch n+1 proceeds (ABS); ``sync`` runs it before epoch n+1 starts (the
stop-the-world snapshot the paper compares against); ``none`` writes no state:
the sink's output goes straight to its table and the checkpoint is declined
with SNAPSHOT_DISABLED (the overhead baseline).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import StrEnum

import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator import sinks, state_files
from coordinator.graph import OperatorKind
from coordinator.jobs import JobDefinition
from coordinator.lifecycle import AckResult, FailureReason
from coordinator.source import source_subtask
from coordinator.store import CheckpointStore, StateHandle
from spark_jobs import keyed_state
from spark_jobs.operators.base import SparkOperators


class SnapshotMode(StrEnum):
    ASYNC = "async"
    SYNC = "sync"
    NONE = "none"


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


@dataclass
class SnapshotWriter:
    spark: SparkSession
    store: CheckpointStore
    job: JobDefinition
    ops: SparkOperators
    state_uri: str
    mode: SnapshotMode
    #: the last checkpoint whose snapshot is durable (the base of the next incremental one)
    base: int | None
    #: snapshots since the last full one, counting ``base`` itself
    chain_length: int
    full_every: int
    partitions: list[str]
    max_in_flight: int = 2
    timings: list[SnapshotTiming] = field(default_factory=list)
    on_ack: Callable[[int, StateHandle, AckResult], None] | None = None

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="abs-snapshot")
        self._in_flight: list[Future] = []

    def snapshot(self, checkpoint_id: int, state: DataFrame) -> None:
        """Take snapshot n of ``state`` (immutable). Returns once the synchronous phase is over."""
        t0 = time.perf_counter()
        timing = SnapshotTiming(checkpoint_id)
        self.timings.append(timing)
        if self.mode is SnapshotMode.NONE:
            self._write_sink_directly(checkpoint_id, state, timing)
            return
        if self.mode is SnapshotMode.SYNC:
            self._async_phase(checkpoint_id, state, timing, sync_ms=None)
            timing.sync_ms, timing.async_ms = timing.async_ms, 0
            return
        # back-pressure: epoch n+1 waits while too many snapshots are still being written
        while len(self._in_flight) >= self.max_in_flight:
            self._in_flight.pop(0).result()
        timing.sync_ms = int((time.perf_counter() - t0) * 1000)
        self._in_flight.append(self._pool.submit(self._async_phase, checkpoint_id, state, timing, timing.sync_ms))

    def close(self) -> list[SnapshotTiming]:
        for fut in self._in_flight:
            fut.result()
        self._pool.shutdown(wait=True)
        return self.timings

    # -- phases --------------------------------------------------------------------
    def _changed_since_base(self, state: DataFrame) -> DataFrame:
        return state if self.base is None else state.where(F.col("updated") > F.lit(self.base))

    def _sink_rows(self, changed: DataFrame) -> tuple[list[tuple], dict[int, int]]:
        """The sink's output (changes since the last durable checkpoint) and its row count per subtask."""
        cols = self.ops.sink_columns
        table = keyed_state.with_subtask(changed.select(*cols), self.ops.key, self.job.parallelism).toArrow()
        per_subtask = {
            int(v["values"]): int(v["counts"]) for v in pc.value_counts(table.column(keyed_state.SUBTASK)).to_pylist()
        }
        return list(zip(*(table.column(c).to_pylist() for c in cols))), per_subtask

    def _write_sink_directly(self, checkpoint_id: int, state: DataFrame, timing: SnapshotTiming) -> None:
        rows, _ = self._sink_rows(self._changed_since_base(state))
        with self.store.sessions.begin() as s:
            sinks.write_direct(s, self.job.sink_table, checkpoint_id, rows)
        self.store.fail(self.job.name, checkpoint_id, FailureReason.SNAPSHOT_DISABLED, "run with --snapshot-mode none")
        self.base = checkpoint_id
        timing.sink_rows = len(rows)

    def _async_phase(self, checkpoint_id: int, state: DataFrame, timing: SnapshotTiming, sync_ms: int | None) -> None:
        """Write, pre-commit and ack. ``sync_ms`` None: this is a stop-the-world (sync) snapshot."""
        t0 = time.perf_counter()
        try:
            handles, full = self._write(checkpoint_id, state, timing)
            write_ms = int((time.perf_counter() - t0) * 1000)
            timing.async_ms = write_ms
            durations = {"sync_ms": write_ms, "async_ms": 0} if sync_ms is None else {"sync_ms": sync_ms, "async_ms": write_ms}
            for h in handles:
                h = replace(h, **durations)
                result = self.store.ack(self.job.name, checkpoint_id, h)
                if self.on_ack:
                    self.on_ack(checkpoint_id, h, result)
        except Exception as exc:  # the checkpoint fails; processing goes on
            first = str(exc).splitlines()[0] if str(exc) else ""
            timing.error = f"{exc.__class__.__name__}: {first}"
            self.store.fail(
                self.job.name, checkpoint_id, FailureReason.ASYNC_SNAPSHOT_FAILED,
                timing.error + "\n" + traceback.format_exc(limit=5),
            )
            return
        self.base = checkpoint_id
        self.chain_length = 1 if full else self.chain_length + 1

    def _write(self, checkpoint_id: int, state: DataFrame, timing: SnapshotTiming) -> tuple[list[StateHandle], bool]:
        p = self.job.parallelism
        full = self.base is None or self.chain_length >= self.full_every
        changed = self._changed_since_base(state)
        # pre-commit the sink first: its rows are the changes since the last durable checkpoint
        rows, sink_per_subtask = self._sink_rows(changed)
        with self.store.sessions.begin() as s:
            sinks.stage(s, self.job.name, self.job.sink_operator, self.job.sink_table, checkpoint_id, rows)
        snap = keyed_state.with_subtask(state if full else changed, self.ops.key, p)
        op_uri = state_files.operator_dir(self.state_uri, self.job.name, checkpoint_id, self.job.state_operator)
        keyed_state.write_snapshot(snap, op_uri)
        stats = keyed_state.subtask_stats(snap, self.ops.state_schema.fieldNames())
        handles = self._stateless_handles()
        for i in range(p):
            st = stats.get(i)
            uri = f"{op_uri}/subtask={i}" if st else None
            handles.append(
                StateHandle(
                    operator=self.job.state_operator,
                    subtask=i,
                    state_uri=uri,
                    base_checkpoint_id=None if full else self.base,
                    state_bytes=keyed_state.bytes_under(self.spark, uri) if uri else 0,
                    state_rows=st.rows if st else 0,
                    checksum=st.checksum if st else None,
                )
            )
        # the sink is forward-connected to the keyed operator: same parallelism, same subtasks
        handles += [
            StateHandle(operator=self.job.sink_operator, subtask=i, state_rows=sink_per_subtask.get(i, 0))
            for i in range(p)
        ]
        timing.full = full
        timing.state_rows = sum(s.rows for s in stats.values())
        timing.state_bytes = sum(h.state_bytes for h in handles)
        timing.sink_rows = len(rows)
        return handles, full

    def _stateless_handles(self) -> list[StateHandle]:
        """Sources ack their offsets (kept in the catalog's cut); stateless operators ack empty state."""
        handles = []
        for op in self.job.graph.operators:
            if op.name in (self.job.state_operator, self.job.sink_operator):
                continue
            for i in range(op.parallelism):
                owned = sum(1 for part in self.partitions if source_subtask(part, op.parallelism) == i)
                rows = owned if op.kind is OperatorKind.SOURCE else 0
                handles.append(StateHandle(operator=op.name, subtask=i, state_rows=rows))
        return handles
