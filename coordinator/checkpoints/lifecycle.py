"""The checkpoint lifecycle as a pure state machine (no I/O).

    trigger                      -> PENDING
    ack from every task          -> COMPLETED   (only through ``complete``)
    decline / timeout / error    -> FAILED(reason)
    newer completed + retention  -> SUBSUMED
    recovery/rewind to older     -> SUPERSEDED  (pending or completed after the restored one)

States, inputs and results are enums; ``TRANSITIONS`` is the one table of
allowed moves. The store applies these rules to catalog rows; the caller does
the I/O, as in python-hyper/h2.
"""

from __future__ import annotations

from enum import StrEnum

from coordinator.errors import IllegalTransitionError


class CheckpointStatus(StrEnum):
    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    SUBSUMED = "SUBSUMED"
    #: replaced by a recovery or rewind to an older checkpoint: its epochs are reprocessed
    SUPERSEDED = "SUPERSEDED"


class CheckpointEvent(StrEnum):
    COMPLETE = "COMPLETE"
    FAIL = "FAIL"
    SUBSUME = "SUBSUME"
    SUPERSEDE = "SUPERSEDE"


class FailureReason(StrEnum):
    """Why a checkpoint failed (after Flink's CheckpointFailureReason)."""

    TIMEOUT = "TIMEOUT"
    TASK_DECLINED = "TASK_DECLINED"
    ASYNC_SNAPSHOT_FAILED = "ASYNC_SNAPSHOT_FAILED"
    PROCESSING_FAILED = "PROCESSING_FAILED"
    SNAPSHOT_DISABLED = "SNAPSHOT_DISABLED"
    SINK_STAGE_FAILED = "SINK_STAGE_FAILED"

    @property
    def counts_toward_tolerance(self) -> bool:
        """A run without snapshots is a choice, not a failure of the job."""
        return self is not FailureReason.SNAPSHOT_DISABLED


class AckResult(StrEnum):
    """What an acknowledgement did. Never an exception: a retried task is harmless."""

    SUCCESS = "SUCCESS"
    DUPLICATE = "DUPLICATE"
    UNKNOWN = "UNKNOWN"
    DISCARDED = "DISCARDED"


class SinkTxnStatus(StrEnum):
    STAGED = "STAGED"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"
    #: nothing written: the sink's high-water marks already cover every record of the txn (a replay)
    DEDUPLICATED = "DEDUPLICATED"


TRANSITIONS: dict[tuple[CheckpointStatus, CheckpointEvent], CheckpointStatus] = {
    (CheckpointStatus.PENDING, CheckpointEvent.COMPLETE): CheckpointStatus.COMPLETED,
    (CheckpointStatus.PENDING, CheckpointEvent.FAIL): CheckpointStatus.FAILED,
    (CheckpointStatus.COMPLETED, CheckpointEvent.SUBSUME): CheckpointStatus.SUBSUMED,
    (CheckpointStatus.PENDING, CheckpointEvent.SUPERSEDE): CheckpointStatus.SUPERSEDED,
    (CheckpointStatus.COMPLETED, CheckpointEvent.SUPERSEDE): CheckpointStatus.SUPERSEDED,
}


def transition(status: CheckpointStatus, event: CheckpointEvent) -> CheckpointStatus:
    try:
        return TRANSITIONS[(status, event)]
    except KeyError:
        raise IllegalTransitionError(f"a {status} checkpoint cannot {event.lower()}") from None


def ack_result(status: CheckpointStatus | None, already_acked: bool) -> AckResult:
    """The outcome of an ack for a checkpoint in ``status`` (None: no such checkpoint)."""
    if status is None:
        return AckResult.UNKNOWN
    if already_acked:
        return AckResult.DUPLICATE
    if status is CheckpointStatus.PENDING:
        return AckResult.SUCCESS
    # A late ack for a checkpoint that already failed or was subsumed.
    return AckResult.DISCARDED
