"""The audit read model: what the Airflow view and ``absreplay report`` show of a job's checkpoints.

One place for the catalog queries both share, typed results, read-only.
Status, timing, size and failure reason per checkpoint come from the public
views ``snapshot_history`` and ``checkpoint_stats``; what the views do not hold
(alignment time, state per operator, the epoch's record count, acks, sink
transactions, dead letters, recoveries) from the tables. The records of a
checkpoint are those its commit carries: the ones between the previous barrier's
cut and its own, and those of the FAILED checkpoints just before it (a FAILED
checkpoint commits nothing: the next run starts from the last completed one);
a replay checkpoint re-does the epoch of the checkpoint it replays. What share
of an epoch's records are dead letters is read here only (``epoch_dead_letters``),
by ``inject``, a run's line per epoch and the view alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import BigInteger, Engine, String, column, func, or_, select, table

from coordinator.catalog.epochs import epoch_records
from coordinator.catalog.epochs import cuts as _cuts, failed as _failed, records as _records, replays as _replays
from coordinator.catalog.models import (
    BackEdgeLog,
    Checkpoint,
    DeadLetter,
    Job,
    JobVersionRow,
    Recovery,
    SinkTransaction,
    TaskAck,
    UTCDateTime,
    record_bytes,
)
from coordinator.errors import CheckpointNotFoundError

SNAPSHOT_HISTORY = table(
    "snapshot_history",
    column("job", String), column("checkpoint_id", BigInteger), column("status", String),
    column("triggered_at", UTCDateTime), column("completed_at", UTCDateTime), column("duration_ms", BigInteger),
    column("state_bytes", BigInteger), column("acked_tasks", BigInteger), column("total_tasks", BigInteger),
    column("failure_reason", String),
)
CHECKPOINT_STATS = table(
    "checkpoint_stats",
    *(column(c) for c in ("job", "checkpoint_id", "snapshot_mode", "state_rows", "sync_ms", "async_ms",
                          "dead_letters", "sink_status", "sink_rows", "back_edge_records", "back_edge_bytes",
                          "replay_of", "recovery_id")),
)
#: dead letters listed on a checkpoint's page (the count is always whole)
DEAD_LETTERS_SHOWN = 100
#: distinct reasons a checkpoint's dead-letter figures name (the first ones recorded)
DEAD_LETTER_REASONS = 3


@dataclass(frozen=True)
class CheckpointSummary:
    """One row of ``snapshot_history`` with the run's parallelism and the replay it is."""

    checkpoint_id: int
    status: str
    triggered_at: datetime | None
    completed_at: datetime | None
    duration_ms: int | None
    state_bytes: int
    acked_tasks: int
    total_tasks: int
    failure_reason: str | None
    parallelism: int | None
    replay_of: int | None
    #: the version of the job's declaration it was taken with (``job_versions``; None: not recorded)
    job_version: str | None = None
    #: True where a later version than the earlier checkpoints' starts
    version_changed: bool = False


@dataclass(frozen=True)
class VersionStart:
    """The first checkpoint taken with a version of the job's declaration."""

    checkpoint_id: int
    digest: str
    summary: str


def version_starts(engine: Engine, job: str) -> list[VersionStart]:
    """Where each version of the job's declaration starts, in checkpoint order: a checkpoint whose version
    differs from the last one recorded before it (checkpoints without a version are passed over)."""
    with engine.connect() as c:
        taken = c.execute(select(Checkpoint.checkpoint_id, Checkpoint.job_version).where(
            Checkpoint.job == job, Checkpoint.job_version.is_not(None)).order_by(Checkpoint.checkpoint_id)).all()
        summaries = dict(c.execute(select(JobVersionRow.digest, JobVersionRow.summary)
                                   .where(JobVersionRow.job == job)).all())
    starts, before = [], None
    for checkpoint_id, digest in taken:
        if digest != before:
            starts.append(VersionStart(checkpoint_id, digest, summaries.get(digest, "")))
        before = digest
    return starts


@dataclass(frozen=True)
class CheckpointPage:
    """Newest first: ``rows`` are ``offset``.. of ``total`` checkpoints (of ``status`` when given)."""

    job: str
    status: str | None
    offset: int
    limit: int
    total: int
    rows: list[CheckpointSummary]


@dataclass(frozen=True)
class EpochPoint:
    """One checkpoint on the job's time axis: the charts' data."""

    checkpoint_id: int
    status: str
    triggered_at: datetime | None
    duration_ms: int | None
    #: the checkpoint's phases (``SnapshotPhases``): barrier alignment, synchronous copy, asynchronous write
    alignment_ms: int
    sync_ms: int
    async_ms: int
    records: int
    state_bytes_by_operator: dict[str, int]
    back_edge_records: int
    back_edge_bytes: int
    failure_reason: str | None
    failure_detail: str | None
    replay_of: int | None


@dataclass(frozen=True)
class AckRow:
    operator: str
    subtask: int
    state_uri: str | None
    base_checkpoint_id: int | None
    state_bytes: int
    state_rows: int
    checksum: str | None
    alignment_ms: int
    sync_ms: int
    async_ms: int
    acked_at: datetime | None
    #: keys the operator's state TTL dropped in this subtask (``coordinator.dataflow.ttl``)
    keys_dropped: int = 0


@dataclass(frozen=True)
class SinkTransactionRow:
    sink: str
    status: str
    rows: int
    files: int | None
    bytes: int | None
    checksum: str | None
    staged_uri: str | None
    staged_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True)
class DeadLetterRow:
    partition: str
    segment: str
    offset: int
    reason: str
    #: readable text, NUL and undecodable bytes escaped; ``payload_bytes``: the exact bytes when they differ
    payload: str
    payload_bytes: bytes | None

    @property
    def record(self) -> bytes:
        """The exact bytes this dead letter kept of its record."""
        return record_bytes(self.payload, self.payload_bytes)


def percent(share: float) -> str:
    """A share as a percentage that never rounds a few to none, nor almost all to all."""
    pct = round(100 * share, 1)
    if share and not pct:
        return "<0.1%"
    if share < 1 and pct == 100:
        return ">99.9%"
    return f"{pct:g}%"


@dataclass(frozen=True)
class EpochDeadLetters:
    """A checkpoint's dead letters against the records of its epoch. Exit 0 and an empty sink look the
    same whether an epoch was quiet or every record was refused (a producer changed its format): these
    figures tell the two apart wherever a checkpoint is shown."""

    count: int
    records: int
    #: count / records (0 for an epoch without records)
    share: float
    #: the first distinct reasons, in the order their dead letters were recorded
    reasons: tuple[str, ...]

    def summary(self) -> str:
        letters = f"{self.count:,} dead letter{'s' * (self.count != 1)}"
        return f"{letters} ({percent(self.share)} of {self.records:,} records)"

    def describe(self) -> str:
        """The summary and the first reasons: a line that says what went wrong, not only how much."""
        return self.summary() + (": " + ", ".join(map(repr, self.reasons)) if self.reasons else "")


@dataclass(frozen=True)
class BackEdgeLogRow:
    operator: str
    subtask: int
    records: int
    bytes: int
    checksum: str | None


@dataclass(frozen=True)
class RecoveryRow:
    id: int
    kind: str
    mode: str
    requested_checkpoint_id: int | None
    from_checkpoint_id: int | None
    to_checkpoint_id: int | None
    superseded: int
    started_at: datetime | None
    finished_at: datetime | None
    result: str
    detail: str | None


@dataclass(frozen=True)
class SnapshotPhases:
    """A checkpoint's barrier alignment, synchronous and asynchronous phase. A run measures them once for the
    checkpoint and records that one figure on every ack (a weak job's acks record none), so they are the
    checkpoint's, never an operator's own."""

    alignment_ms: int = 0
    sync_ms: int = 0
    async_ms: int = 0


@dataclass(frozen=True)
class CheckpointDetail:
    """Everything the catalog holds about one checkpoint."""

    job: str
    summary: CheckpointSummary
    snapshot_mode: str | None
    failure_detail: str | None
    cut: dict[str, int]
    records: int
    acks: list[AckRow]
    sink_transactions: list[SinkTransactionRow]
    dead_letter_count: int
    #: the count against the epoch's records, with the first reasons
    dead_letter_figures: EpochDeadLetters
    dead_letters: list[DeadLetterRow]
    back_edge_records: int
    back_edge_bytes: int
    back_edge_logs: list[BackEdgeLogRow]
    recovery_id: int | None
    #: recoveries that asked for, restored, reached or created this checkpoint
    recoveries: list[RecoveryRow] = field(default_factory=list)
    #: the snapshot's phases, measured once for the whole checkpoint (``snapshot_phases``)
    phases: SnapshotPhases | None = None


def _summary_query(job: str):
    h = SNAPSHOT_HISTORY.c
    return (
        select(h.checkpoint_id, h.status, h.triggered_at, h.completed_at, h.duration_ms, h.state_bytes,
               h.acked_tasks, h.total_tasks, h.failure_reason, Checkpoint.parallelism, Checkpoint.replay_of,
               Checkpoint.job_version)
        .select_from(SNAPSHOT_HISTORY.join(
            Checkpoint, (Checkpoint.job == h.job) & (Checkpoint.checkpoint_id == h.checkpoint_id)))
        .where(h.job == job)
    )


def _summary(row, changed: Iterable[int] = ()) -> CheckpointSummary:
    """``changed``: the checkpoints where a later version of the declaration starts."""
    m = row._mapping
    return CheckpointSummary(
        checkpoint_id=int(m["checkpoint_id"]), status=m["status"],
        triggered_at=m["triggered_at"], completed_at=m["completed_at"],
        duration_ms=None if m["duration_ms"] is None else int(m["duration_ms"]),
        state_bytes=int(m["state_bytes"] or 0), acked_tasks=int(m["acked_tasks"] or 0),
        total_tasks=int(m["total_tasks"]), failure_reason=m["failure_reason"],
        parallelism=m["parallelism"], replay_of=m["replay_of"], job_version=m["job_version"],
        version_changed=int(m["checkpoint_id"]) in changed,
    )


def checkpoint_page(engine: Engine, job: str, status: str | None = None, offset: int = 0,
                    limit: int = 50) -> CheckpointPage:
    """A page of the job's whole retained history, newest first, optionally of one status."""
    query = _summary_query(job)
    if status:
        query = query.where(SNAPSHOT_HISTORY.c.status == status)
    with engine.connect() as c:
        total = c.scalar(select(func.count()).select_from(query.subquery())) or 0
        rows = c.execute(query.order_by(SNAPSHOT_HISTORY.c.checkpoint_id.desc()).offset(offset).limit(limit)).all()
    changed = {v.checkpoint_id for v in version_starts(engine, job)[1:]}
    return CheckpointPage(job, status or None, offset, limit, int(total), [_summary(r, changed) for r in rows])


def snapshot_phases(c, job: str, checkpoint_ids: Iterable[int] | None = None) -> dict[int, SnapshotPhases]:
    """Each checkpoint's snapshot phases (``SnapshotPhases``: the same on all its acks; the largest if not)."""
    query = (select(TaskAck.checkpoint_id, func.max(TaskAck.alignment_ms), func.max(TaskAck.sync_ms),
                    func.max(TaskAck.async_ms)).where(TaskAck.job == job).group_by(TaskAck.checkpoint_id))
    if checkpoint_ids is not None:
        query = query.where(TaskAck.checkpoint_id.in_(sorted(set(checkpoint_ids))))
    return {int(cid): SnapshotPhases(int(a or 0), int(sy or 0), int(asy or 0))
            for cid, a, sy, asy in c.execute(query)}


def _first_reasons(c, job: str, checkpoint_id: int) -> tuple[str, ...]:
    return tuple(c.scalars(
        select(DeadLetter.reason).where(DeadLetter.job == job, DeadLetter.checkpoint_id == checkpoint_id)
        .group_by(DeadLetter.reason).order_by(func.min(DeadLetter.id)).limit(DEAD_LETTER_REASONS)))


def epoch_dead_letters(engine: Engine, job: str, checkpoint_ids: Iterable[int]) -> dict[int, EpochDeadLetters]:
    """Each checkpoint's dead letters (the rows recorded with it: ``checkpoint_stats.dead_letters``, the
    first distinct reasons) against its epoch's records (``epoch_records``). A replay's own dead letters
    are the late records its run found; those of the lines it re-reads stay with the barrier that
    registered them, which reported them at inject. A FAILED checkpoint carries no record: its dead
    letters are counted against the records its barrier registered."""
    ids = sorted(set(checkpoint_ids))
    if not ids:
        return {}  # e.g. a run with nothing pending: no need to read every cut
    with engine.connect() as c:
        counts = {int(cid): int(n) for cid, n in c.execute(
            select(DeadLetter.checkpoint_id, func.count())
            .where(DeadLetter.job == job, DeadLetter.checkpoint_id.in_(ids)).group_by(DeadLetter.checkpoint_id))}
        cuts, replays, failed = _cuts(c, job), _replays(c, job), _failed(c, job)
        records = epoch_records(cuts, replays, failed)
        registered = epoch_records(cuts, replays) if failed.intersection(ids) else records
        reasons = {cid: _first_reasons(c, job, cid) for cid in counts}
    figures = {}
    for cid in ids:
        count, epoch = counts.get(cid, 0), (registered if cid in failed else records).get(cid, 0)
        figures[cid] = EpochDeadLetters(count, epoch, count / epoch if epoch else 0.0, reasons.get(cid, ()))
    return figures


def timeline(engine: Engine, job: str) -> list[EpochPoint]:
    """Every retained checkpoint of the job, oldest first, with what the charts plot."""
    s = CHECKPOINT_STATS.c
    with engine.connect() as c:
        base = c.execute(
            _summary_query(job).add_columns(Checkpoint.failure_detail, s.back_edge_records, s.back_edge_bytes)
            .join(CHECKPOINT_STATS, (s.job == Checkpoint.job) & (s.checkpoint_id == Checkpoint.checkpoint_id))
            .order_by(SNAPSHOT_HISTORY.c.checkpoint_id)
        ).all()
        phases = snapshot_phases(c, job)
        by_operator: dict[int, dict[str, int]] = {}
        for cid, operator, size in c.execute(
                select(TaskAck.checkpoint_id, TaskAck.operator, func.sum(TaskAck.state_bytes))
                .where(TaskAck.job == job).group_by(TaskAck.checkpoint_id, TaskAck.operator)):
            by_operator.setdefault(int(cid), {})[operator] = int(size or 0)
        records = _records(c, job)
    points = []
    for r in base:
        summary, cid = _summary(r), int(r.checkpoint_id)
        p = phases.get(cid, SnapshotPhases())
        points.append(EpochPoint(
            checkpoint_id=cid, status=summary.status, triggered_at=summary.triggered_at,
            duration_ms=summary.duration_ms,
            alignment_ms=p.alignment_ms, sync_ms=p.sync_ms, async_ms=p.async_ms, records=records.get(cid, 0),
            state_bytes_by_operator=by_operator.get(cid, {}),
            back_edge_records=int(r.back_edge_records or 0), back_edge_bytes=int(r.back_edge_bytes or 0),
            failure_reason=summary.failure_reason, failure_detail=r.failure_detail, replay_of=summary.replay_of,
        ))
    return points


def recoveries_touching(engine: Engine, job: str, checkpoint_id: int, created_by: int | None) -> list[RecoveryRow]:
    touching = or_(Recovery.requested_checkpoint_id == checkpoint_id, Recovery.from_checkpoint_id == checkpoint_id,
                   Recovery.to_checkpoint_id == checkpoint_id, Recovery.id == (created_by or -1))
    with engine.connect() as c:
        rows = c.execute(select(Recovery).where(Recovery.job == job, touching).order_by(Recovery.id)).all()
    return [RecoveryRow(**{k: v for k, v in r._mapping.items() if k in RecoveryRow.__dataclass_fields__})
            for r in rows]


def checkpoint_detail(engine: Engine, job: str, checkpoint_id: int) -> CheckpointDetail:
    """Checkpoint ``checkpoint_id`` of ``job``: its summary, acks, sink transactions, dead letters, recoveries."""
    s = CHECKPOINT_STATS.c
    with engine.connect() as c:
        row = c.execute(
            _summary_query(job).add_columns(Checkpoint.failure_detail, s.snapshot_mode, s.back_edge_records,
                                            s.back_edge_bytes, Checkpoint.recovery_id)
            .join(CHECKPOINT_STATS, (s.job == Checkpoint.job) & (s.checkpoint_id == Checkpoint.checkpoint_id))
            .where(SNAPSHOT_HISTORY.c.checkpoint_id == checkpoint_id)
        ).first()
        if row is None:
            raise CheckpointNotFoundError(job, checkpoint_id)
        acks = [AckRow(**{k: getattr(a, k) for k in AckRow.__dataclass_fields__}) for a in c.execute(
            select(TaskAck).where(TaskAck.job == job, TaskAck.checkpoint_id == checkpoint_id)
            .order_by(TaskAck.operator, TaskAck.subtask)).all()]
        txns = [SinkTransactionRow(**{k: getattr(t, k) for k in SinkTransactionRow.__dataclass_fields__})
                for t in c.execute(select(SinkTransaction).where(
                    SinkTransaction.job == job, SinkTransaction.checkpoint_id == checkpoint_id)
                    .order_by(SinkTransaction.sink)).all()]
        letters = [DeadLetterRow(**{k: getattr(d, k) for k in DeadLetterRow.__dataclass_fields__})
                   for d in c.execute(select(DeadLetter).where(
                       DeadLetter.job == job, DeadLetter.checkpoint_id == checkpoint_id)
                       .order_by(DeadLetter.id).limit(DEAD_LETTERS_SHOWN)).all()]
        logs = [BackEdgeLogRow(**{k: getattr(b, k) for k in BackEdgeLogRow.__dataclass_fields__})
                for b in c.execute(select(BackEdgeLog).where(
                    BackEdgeLog.job == job, BackEdgeLog.checkpoint_id == checkpoint_id)
                    .order_by(BackEdgeLog.operator, BackEdgeLog.subtask)).all()]
        cuts = _cuts(c, job)
        records = epoch_records(cuts, _replays(c, job), _failed(c, job))
        phases = snapshot_phases(c, job, [checkpoint_id]).get(checkpoint_id, SnapshotPhases())
    summary = _summary(row, {v.checkpoint_id for v in version_starts(engine, job)[1:]})
    dead = epoch_dead_letters(engine, job, [checkpoint_id])[checkpoint_id]
    return CheckpointDetail(
        job=job, summary=summary, snapshot_mode=row.snapshot_mode, failure_detail=row.failure_detail,
        cut=cuts.get(checkpoint_id, {}), records=records.get(checkpoint_id, 0),
        acks=acks, sink_transactions=txns, dead_letter_count=dead.count, dead_letter_figures=dead, dead_letters=letters,
        back_edge_records=int(row.back_edge_records or 0), back_edge_bytes=int(row.back_edge_bytes or 0),
        back_edge_logs=logs, recovery_id=row.recovery_id,
        recoveries=recoveries_touching(engine, job, checkpoint_id, row.recovery_id), phases=phases,
    )



def job_names(engine: Engine) -> list[str]:
    """Every job with a row in the catalog."""
    with engine.connect() as c:
        return list(c.scalars(select(Job.name).order_by(Job.name)))


def is_weak(engine: Engine, job: str) -> bool:
    """Whether the job runs with weak consistency (``coordinator.checkpoints.weak``): its checkpoints
    record the snapshot mode "weak". Such a job has no consistent checkpoint to recover to."""
    with engine.connect() as c:
        return c.scalar(select(Checkpoint.checkpoint_id).where(
            Checkpoint.job == job, Checkpoint.snapshot_mode == "weak").limit(1)) is not None
