"""The checkpoint store: the lifecycle rules of ``coordinator.checkpoints.lifecycle`` applied to catalog rows.

Each public method is one explicit transaction. Concurrency is left to the
database: every transaction that changes a job's checkpoints, sink or marks
first locks the job row (``SELECT ... FOR UPDATE`` on PostgreSQL, ``BEGIN
IMMEDIATE`` on SQLite), so they are serialized per job; and (job,
checkpoint_id) is a primary key, so ids strictly increase per job even under
concurrent triggers. A processing run writes through ``fenced(token)``: the same
lock also checks that the run still owns the job (coordinator.checkpoints.lease).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, delete, func, select, text
from sqlalchemy.orm import Session

from coordinator.catalog.db import session_factory
from coordinator.catalog.models import (
    Checkpoint,
    Job,
    SinkTransaction,
    SourceCut,
    SourceSegment,
    TaskAck,
    utcnow,
)
from coordinator.checkpoints import back_edge_logs
from coordinator.checkpoints.lifecycle import (
    AckResult,
    CheckpointEvent,
    CheckpointStatus,
    FailureReason,
    SinkTxnStatus,
    ack_result,
    transition,
)
from coordinator.checkpoints.policy import CheckpointPolicy, TriggerDecision, decide_trigger, is_timed_out
from coordinator.checkpoints.state_handle import StateHandle, handle_columns
from coordinator.dataflow import versions
from coordinator.dataflow.jobs import JobDefinition, check_parallelism
from coordinator.errors import CheckpointNotFoundError, FencedError


@dataclass(frozen=True)
class TriggerOutcome:
    decision: TriggerDecision
    checkpoint_id: int | None
    cut: dict[str, int]
    new_segments: int
    new_records: int


# Called inside the trigger transaction with the job row locked: registers new
# segments and returns the cut (partition -> end offset) and the counts.
CutBuilder = Callable[[Session, int], tuple[dict[str, int], int, int]]


def policy_of(job: Job) -> CheckpointPolicy:
    return CheckpointPolicy(
        max_concurrent_pending=job.max_concurrent_pending,
        min_pause_ms=job.min_pause_ms,
        timeout_ms=job.timeout_ms,
        tolerable_failures=job.tolerable_failures,
        retained=job.retained,
        full_snapshot_every=job.full_snapshot_every,
    )


class CheckpointStore:
    def __init__(self, engine: Engine, fence: int | None = None) -> None:
        self.engine = engine
        self.sessions = session_factory(engine)
        #: a processing run's fencing token: every write transaction checks it (None: not a run)
        self.fence = fence

    def fenced(self, token: int | None) -> CheckpointStore:
        """This store as a processing run holding fencing token ``token`` writes through it."""
        return CheckpointStore(self.engine, token)

    # -- jobs -------------------------------------------------------------
    def register_job(self, definition: JobDefinition) -> None:
        """Create the job's row on first use; an existing row (and its tuned policy) is kept."""
        graph = definition.execution_graph
        with self.sessions.begin() as s:
            if s.get(Job, definition.name) is not None:
                return
            p = definition.policy
            s.add(
                Job(
                    name=definition.name,
                    execution_graph=json.dumps(graph.to_json(), sort_keys=True),
                    total_tasks=len(graph.tasks),
                    last_checkpoint_id=0,
                    max_concurrent_pending=p.max_concurrent_pending,
                    min_pause_ms=p.min_pause_ms,
                    timeout_ms=p.timeout_ms,
                    tolerable_failures=p.tolerable_failures,
                    retained=p.retained,
                    full_snapshot_every=p.full_snapshot_every,
                    created_at=utcnow(),
                )
            )

    def job(self, name: str) -> Job | None:
        with self.sessions() as s:
            return s.get(Job, name)

    def policy(self, name: str) -> CheckpointPolicy:
        job = self.job(name)
        assert job is not None, name
        return policy_of(job)

    def _lock_job(self, s: Session, name: str) -> Job:
        job = s.execute(select(Job).where(Job.name == name).with_for_update()).scalar_one()
        if self.fence is not None and job.fencing_token != self.fence:
            raise FencedError(name, self.fence, job.fencing_token)
        return job

    def lock_job(self, s: Session, name: str) -> Job:
        """Lock the job row in ``s`` (what every change of a job's checkpoints, sink or marks
        serializes on, and where a run's fencing token is checked), for callers outside the store."""
        return self._lock_job(s, name)

    # -- trigger ----------------------------------------------------------
    def trigger(self, job_name: str, build_cut: CutBuilder, now: datetime | None = None) -> TriggerOutcome:
        """Inject barrier n: allocate the next id, record the cut, checkpoint PENDING."""
        with self.sessions.begin() as s:
            job = self._lock_job(s, job_name)
            # read the clock only once the lock is held: a waiting trigger must not predate the winner
            now = now or utcnow()
            pending = s.scalar(
                select(func.count()).select_from(Checkpoint).where(
                    Checkpoint.job == job_name, Checkpoint.status == CheckpointStatus.PENDING
                )
            )
            last = s.scalar(select(func.max(Checkpoint.triggered_at)).where(Checkpoint.job == job_name))
            decision = decide_trigger(policy_of(job), pending or 0, last, now)
            if decision is not TriggerDecision.EXECUTE:
                return TriggerOutcome(decision, None, {}, 0, 0)
            checkpoint_id = job.last_checkpoint_id + 1
            job.last_checkpoint_id = checkpoint_id
            s.add(
                Checkpoint(
                    job=job_name,
                    checkpoint_id=checkpoint_id,
                    status=CheckpointStatus.PENDING,
                    total_tasks=job.total_tasks,
                    triggered_at=now,
                )
            )
            s.flush()
            cut, segments, records = build_cut(s, checkpoint_id)
            s.add_all(
                SourceCut(job=job_name, checkpoint_id=checkpoint_id, partition=p, offset=o)
                for p, o in sorted(cut.items())
            )
            return TriggerOutcome(decision, checkpoint_id, cut, segments, records)

    # -- acks -------------------------------------------------------------
    def ack(self, job_name: str, checkpoint_id: int, handle: StateHandle) -> AckResult:
        """Record one task's ack; the last one completes the checkpoint in the same transaction."""
        return self.ack_many(job_name, checkpoint_id, [handle])[0]

    def ack_many(self, job_name: str, checkpoint_id: int, handles: list[StateHandle]) -> list[AckResult]:
        """Several tasks' acks in one transaction (each with the result a lone ack would get)."""
        with self.sessions.begin() as s:
            self._lock_job(s, job_name)
            return self._ack(s, job_name, checkpoint_id, handles, self._task_names(s, job_name))

    def ack_many_with_back_edge_logs(self, job_name: str, checkpoint_id: int, handles: list[StateHandle],
                                     logs: list[back_edge_logs.BackEdgeLogHandle]) -> list[AckResult]:
        """``ack_many`` for tasks of a loop: their part of back-edge log n is recorded in the same
        transaction, so a checkpoint that completes always has its log (only while it is PENDING)."""
        with self.sessions.begin() as s:
            self._lock_job(s, job_name)
            ck = s.get(Checkpoint, (job_name, checkpoint_id))
            if ck is not None and ck.status == CheckpointStatus.PENDING:
                back_edge_logs.record(s, job_name, checkpoint_id, logs)
            return self._ack(s, job_name, checkpoint_id, handles, self._task_names(s, job_name))

    def _ack(self, s: Session, job_name: str, checkpoint_id: int, handles: list[StateHandle],
             tasks: set[str]) -> list[AckResult]:
        """The acks of ``handles``, in order, each as if alone; the one that makes every task's ack completes
        the checkpoint. Reads the checkpoint's acks once (not a lookup and a count per handle)."""
        ck = s.get(Checkpoint, (job_name, checkpoint_id))
        if ck is None:
            return [AckResult.UNKNOWN] * len(handles)
        acked = set(s.execute(select(TaskAck.operator, TaskAck.subtask).where(
            TaskAck.job == job_name, TaskAck.checkpoint_id == checkpoint_id)).tuples())
        results = []
        for handle in handles:
            if handle.task not in tasks:
                results.append(AckResult.UNKNOWN)
                continue
            result = ack_result(CheckpointStatus(ck.status), (handle.operator, handle.subtask) in acked)
            if result is AckResult.SUCCESS:
                s.add(TaskAck(job=job_name, checkpoint_id=checkpoint_id, acked_at=utcnow(), **handle_columns(handle)))
                acked.add((handle.operator, handle.subtask))
                if len(acked) == ck.total_tasks:
                    ck.status = transition(CheckpointStatus(ck.status), CheckpointEvent.COMPLETE)
                    ck.completed_at = utcnow()
            results.append(result)
        return results

    def _task_names(self, s: Session, job_name: str) -> set[str]:
        graph = json.loads(s.get(Job, job_name).execution_graph)
        return {f"{o['name']}#{i}" for o in graph["operators"] for i in range(o["parallelism"])}

    # -- failures ---------------------------------------------------------
    def fail(self, job_name: str, checkpoint_id: int, reason: FailureReason, detail: str = "") -> bool:
        """Decline a PENDING checkpoint; returns False if it was no longer pending. Aborts its sink txns."""
        with self.sessions.begin() as s:
            self._lock_job(s, job_name)
            return self._fail(s, job_name, checkpoint_id, reason, detail)

    def _fail(self, s: Session, job_name: str, checkpoint_id: int, reason: FailureReason, detail: str) -> bool:
        ck = s.get(Checkpoint, (job_name, checkpoint_id))
        if ck is None or ck.status != CheckpointStatus.PENDING:
            return False
        ck.status = transition(CheckpointStatus(ck.status), CheckpointEvent.FAIL)
        ck.failure_reason = reason
        ck.failure_detail = detail[:2000] or None
        ck.failed_at = utcnow()
        return True

    def expire_timed_out(self, job_name: str, now: datetime | None = None) -> list[int]:
        with self.sessions.begin() as s:
            return self.expire_timed_out_in(s, job_name, now)

    def expire_timed_out_in(self, s: Session, job_name: str, now: datetime | None = None) -> list[int]:
        """Fail the PENDING checkpoints older than the timeout, in the caller's transaction."""
        now = now or utcnow()
        job = self._lock_job(s, job_name)
        policy = policy_of(job)
        expired = [
            ck.checkpoint_id
            for ck in s.scalars(
                select(Checkpoint).where(Checkpoint.job == job_name, Checkpoint.status == CheckpointStatus.PENDING)
            )
            if is_timed_out(policy, ck.triggered_at, now)
        ]
        for cid in expired:
            self._fail(s, job_name, cid, FailureReason.TIMEOUT, f"pending longer than {policy.timeout_ms} ms")
        return expired

    def consecutive_failures(self, job_name: str) -> int:
        """Failed checkpoints (that count toward tolerance) since the last completed one."""
        with self.sessions() as s:
            rows = s.execute(
                select(Checkpoint.status, Checkpoint.failure_reason)
                .where(Checkpoint.job == job_name, Checkpoint.status != CheckpointStatus.PENDING)
                .order_by(Checkpoint.checkpoint_id.desc())
            ).all()
        n = 0
        for status, reason in rows:
            if status != CheckpointStatus.FAILED:
                break
            if reason is None or FailureReason(reason).counts_toward_tolerance:
                n += 1
        return n

    # -- retention ----------------------------------------------------------
    def subsume_beyond_retention(self, job_name: str) -> list[int]:
        """Mark completed checkpoints older than the newest ``retained`` ones SUBSUMED.

        A checkpoint whose sink transaction is not committed yet is kept: its
        output must reach the sink first.
        """
        with self.sessions.begin() as s:
            job = self._lock_job(s, job_name)
            completed = list(
                s.scalars(
                    select(Checkpoint)
                    .where(Checkpoint.job == job_name, Checkpoint.status == CheckpointStatus.COMPLETED)
                    .order_by(Checkpoint.checkpoint_id.desc())
                )
            )
            staged = set(
                s.scalars(
                    select(SinkTransaction.checkpoint_id).where(
                        SinkTransaction.job == job_name, SinkTransaction.status == SinkTxnStatus.STAGED
                    )
                )
            )
            subsumed = []
            for ck in completed[job.retained :]:
                if ck.checkpoint_id in staged:
                    continue
                ck.status = transition(CheckpointStatus(ck.status), CheckpointEvent.SUBSUME)
                ck.subsumed_at = utcnow()
                subsumed.append(ck.checkpoint_id)
            return subsumed

    # -- queries --------------------------------------------------------------
    def checkpoint(self, job_name: str, checkpoint_id: int) -> Checkpoint:
        with self.sessions() as s:
            ck = s.get(Checkpoint, (job_name, checkpoint_id))
        if ck is None:
            raise CheckpointNotFoundError(job_name, checkpoint_id)
        return ck

    def latest_completed(self, job_name: str) -> Checkpoint | None:
        with self.sessions() as s:
            return s.scalars(
                select(Checkpoint)
                .where(Checkpoint.job == job_name, Checkpoint.status == CheckpointStatus.COMPLETED)
                .order_by(Checkpoint.checkpoint_id.desc())
                .limit(1)
            ).first()

    def pending_after(self, job_name: str, checkpoint_id: int) -> list[Checkpoint]:
        with self.sessions() as s:
            return list(
                s.scalars(
                    select(Checkpoint)
                    .where(
                        Checkpoint.job == job_name,
                        Checkpoint.checkpoint_id > checkpoint_id,
                        Checkpoint.status == CheckpointStatus.PENDING,
                    )
                    .order_by(Checkpoint.checkpoint_id)
                )
            )

    def checkpoints(self, job_name: str) -> list[Checkpoint]:
        with self.sessions() as s:
            return list(
                s.scalars(select(Checkpoint).where(Checkpoint.job == job_name).order_by(Checkpoint.checkpoint_id))
            )

    def cut(self, job_name: str, checkpoint_id: int) -> dict[str, int]:
        with self.sessions() as s:
            rows = s.execute(
                select(SourceCut.partition, SourceCut.offset).where(
                    SourceCut.job == job_name, SourceCut.checkpoint_id == checkpoint_id
                )
            ).all()
        return {p: o for p, o in rows}

    def segments_between(self, job_name: str, start: dict[str, int], end: dict[str, int]) -> list[SourceSegment]:
        """Segments whose records lie in [start, end) per partition (cuts fall on segment bounds)."""
        with self.sessions() as s:
            segs = list(s.scalars(select(SourceSegment).where(SourceSegment.job == job_name)))
        return sorted(
            (
                seg
                for seg in segs
                if start.get(seg.partition, 0) <= seg.first_offset < end.get(seg.partition, 0)
            ),
            key=lambda seg: (seg.partition, seg.first_offset),
        )

    def acks(self, job_name: str, checkpoint_id: int) -> list[TaskAck]:
        with self.sessions() as s:
            return list(
                s.scalars(
                    select(TaskAck)
                    .where(TaskAck.job == job_name, TaskAck.checkpoint_id == checkpoint_id)
                    .order_by(TaskAck.operator, TaskAck.subtask)
                )
            )

    def store_locations(self, job_name: str) -> dict[str, dict[int, str]]:
        """Where each local store of the job was last seen: operator -> subtask -> the executor its last acked
        task ran on (``task_acks.store_location``), for the next run's store tasks to prefer its host."""
        newest = (select(TaskAck.operator, TaskAck.subtask, func.max(TaskAck.checkpoint_id).label("checkpoint_id"))
                  .where(TaskAck.job == job_name, TaskAck.store_location.is_not(None))
                  .group_by(TaskAck.operator, TaskAck.subtask).subquery())
        with self.sessions() as s:
            rows = s.execute(select(TaskAck.operator, TaskAck.subtask, TaskAck.store_location).join(
                newest, (TaskAck.operator == newest.c.operator) & (TaskAck.subtask == newest.c.subtask)
                & (TaskAck.checkpoint_id == newest.c.checkpoint_id)).where(TaskAck.job == job_name)).all()
        found: dict[str, dict[int, str]] = {}
        for operator, subtask, where in rows:
            found.setdefault(operator, {})[subtask] = where
        return found

    def sink_rows(self, job_name: str, checkpoint_id: int) -> int:
        """Rows the checkpoint's epoch changed (its sink transaction's size)."""
        with self.sessions() as s:
            rows = s.scalar(
                select(func.sum(SinkTransaction.rows)).where(
                    SinkTransaction.job == job_name, SinkTransaction.checkpoint_id == checkpoint_id
                )
            )
        return int(rows or 0)

    def all_acks(self, job_name: str) -> list[TaskAck]:
        with self.sessions() as s:
            return list(s.scalars(select(TaskAck).where(TaskAck.job == job_name)))

    def history(self, job_name: str) -> list[dict]:
        with self.engine.connect() as c:
            rows = c.execute(
                text("SELECT * FROM snapshot_history WHERE job = :job ORDER BY checkpoint_id"),
                {"job": job_name},
            ).mappings()
            return [dict(r) for r in rows]

    def begin_attempt(self, job_name: str, checkpoint_ids: list[int], snapshot_mode: str,
                      keep: dict[int, set[int]] | None = None, definition: JobDefinition | None = None,
                      epoch_starts: dict[int, int] | None = None) -> None:
        """A processing run takes these PENDING checkpoints: a dead attempt's acks are dropped
        (this run acks afresh) and the snapshot mode is recorded. ``keep`` (partial recovery):
        checkpoint -> subtask indexes whose acks stay (those tasks do not run again).
        ``definition``: the job as the run executes it (see ``_adopt_run_graph``). ``epoch_starts``:
        checkpoint -> the checkpoint whose cut starts its epoch in this run (``Checkpoint.epoch_start``)."""
        keep = keep or {}
        with self.sessions.begin() as s:
            self._lock_job(s, job_name)
            if definition is not None:
                self._adopt_run_graph(s, definition, checkpoint_ids)
            for checkpoint_id in checkpoint_ids:
                ck = s.get(Checkpoint, (job_name, checkpoint_id))
                if ck is None or ck.status != CheckpointStatus.PENDING:
                    continue
                s.execute(delete(TaskAck).where(
                    TaskAck.job == job_name, TaskAck.checkpoint_id == checkpoint_id,
                    TaskAck.subtask.not_in(sorted(keep.get(checkpoint_id, ()))),
                ))
                ck.snapshot_mode = snapshot_mode
                if epoch_starts and checkpoint_id in epoch_starts:
                    ck.epoch_start = epoch_starts[checkpoint_id]

    def _adopt_run_graph(self, s: Session, definition: JobDefinition, checkpoint_ids: list[int]) -> None:
        """With the job row locked: the run's execution graph becomes the job row's (a run at
        another parallelism: acks of its new subtasks count, those of subtasks it no longer has
        are UNKNOWN), the run's PENDING checkpoints take its task count, and every one of them
        records the parallelism and the version of the declaration (``job_versions``) it is taken at."""
        job = s.get(Job, definition.name)
        check_parallelism(job.name, definition.parallelism, job.max_parallelism)
        graph = definition.execution_graph
        encoded = json.dumps(graph.to_json(), sort_keys=True)
        if job.execution_graph != encoded:
            job.execution_graph, job.total_tasks = encoded, len(graph.tasks)
        digest = versions.record(s, definition)
        for checkpoint_id in checkpoint_ids:
            ck = s.get(Checkpoint, (definition.name, checkpoint_id))
            if ck is not None and ck.status == CheckpointStatus.PENDING:
                ck.total_tasks, ck.parallelism = job.total_tasks, definition.parallelism
                ck.job_version = digest

