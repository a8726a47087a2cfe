"""Back-edge logs in the catalog: one ``back_edge_logs`` row per loop-tail subtask and checkpoint.

Back-edge log n holds the records still circulating in a loop when epoch n
ended (the paper's back-edge records, which a snapshot of a cyclic graph must
hold). It is part of checkpoint n: the Spark side writes
it as Parquet under ``chk-n/<loop tail>/subtask=<i>/`` and its row (uri,
records, bytes, checksum) goes into the catalog in the same transaction as
that subtask's acks (``CheckpointStore.ack_many_with_back_edge_logs``), so a
checkpoint that completed always has its log. ``checkpoint_stats`` sums the
rows per checkpoint (back_edge_records, back_edge_bytes).

For the sinks' high-water marks the loop is one more input: an epoch of a job
with a loop reads the previous back-edge log besides the source records, so an
epoch with no new source record can still change the output (the loop drains).
``loop_position`` names that input's position: the epoch itself (for a replay
after a recovery, the original epoch it re-does, through replays of replays),
so a new epoch is never mistaken for a replay of output already committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from coordinator.catalog.models import BackEdgeLog, Checkpoint, utcnow

#: the pseudo partition of the loop in a sink's high-water marks
LOOP_PARTITION = "(back-edge)"


@dataclass(frozen=True)
class BackEdgeLogHandle:
    """Where one loop-tail subtask's part of back-edge log n lives, and what it holds."""

    operator: str
    subtask: int
    uri: str | None
    records: int
    bytes: int = 0
    checksum: str | None = None


def record(s: Session, job: str, checkpoint_id: int, handles: Sequence[BackEdgeLogHandle]) -> None:
    """Write (or replace a dead attempt's) rows, inside the caller's transaction."""
    for h in handles:
        s.merge(
            BackEdgeLog(
                job=job, checkpoint_id=checkpoint_id, operator=h.operator, subtask=h.subtask, uri=h.uri,
                records=h.records, bytes=h.bytes, checksum=h.checksum, created_at=utcnow(),
            )
        )


def of_checkpoint(sessions: sessionmaker[Session], job: str, checkpoint_id: int) -> list[BackEdgeLogHandle]:
    with sessions() as s:
        rows = s.scalars(
            select(BackEdgeLog)
            .where(BackEdgeLog.job == job, BackEdgeLog.checkpoint_id == checkpoint_id)
            .order_by(BackEdgeLog.operator, BackEdgeLog.subtask)
        ).all()
    return [BackEdgeLogHandle(r.operator, r.subtask, r.uri, r.records, r.bytes, r.checksum) for r in rows]


def loop_position(s: Session, job: str, checkpoint_id: int) -> dict[str, int]:
    """``{LOOP_PARTITION: epoch}`` for a checkpoint of a job with a loop, ``{}`` otherwise."""
    has_log = s.scalar(
        select(func.count()).select_from(BackEdgeLog).where(
            BackEdgeLog.job == job, BackEdgeLog.checkpoint_id == checkpoint_id
        )
    )
    if not has_log:
        return {}
    # a replay re-does the epoch of the checkpoint it replays, and a replay of a replay the same
    # epoch again: the position is the original epoch's, so every replay of it is deduplicated
    epoch = checkpoint_id
    while (ck := s.get(Checkpoint, (job, epoch))) is not None and ck.replay_of is not None:
        epoch = ck.replay_of
    return {LOOP_PARTITION: epoch}
