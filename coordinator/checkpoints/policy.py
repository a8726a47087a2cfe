"""Checkpoint policies and the trigger decision (after Flink's CheckpointRequestDecider).

The decider is pure: it takes the facts and a clock reading and says whether a
barrier is injected now or skipped. A skipped barrier loses nothing: the
records it would have cut simply belong to the next barrier's epoch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from coordinator.keywords import checked_keywords


@checked_keywords()
@dataclass(frozen=True)
class CheckpointPolicy:
    max_concurrent_pending: int = 1000
    min_pause_ms: int = 0
    timeout_ms: int = 24 * 3600 * 1000
    tolerable_failures: int = 3
    retained: int = 3
    # every how many checkpoints a full (not incremental) state snapshot is written
    full_snapshot_every: int = 8

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value < 0:
                raise ValueError(f"policy {name} must be >= 0, got {value}")
        if self.retained < 1:
            raise ValueError("policy retained must be >= 1 (recovery needs a checkpoint)")
        if self.full_snapshot_every < 1:
            raise ValueError("policy full_snapshot_every must be >= 1")


class TriggerDecision(StrEnum):
    EXECUTE = "EXECUTE"
    SKIP_TOO_MANY_PENDING = "SKIP_TOO_MANY_PENDING"
    SKIP_MIN_PAUSE = "SKIP_MIN_PAUSE"


def decide_trigger(
    policy: CheckpointPolicy,
    pending: int,
    last_triggered_at: datetime | None,
    now: datetime,
) -> TriggerDecision:
    if pending >= policy.max_concurrent_pending:
        return TriggerDecision.SKIP_TOO_MANY_PENDING
    if last_triggered_at is not None and now - last_triggered_at < timedelta(
        milliseconds=policy.min_pause_ms
    ):
        return TriggerDecision.SKIP_MIN_PAUSE
    return TriggerDecision.EXECUTE


def is_timed_out(policy: CheckpointPolicy, triggered_at: datetime, now: datetime) -> bool:
    return now - triggered_at > timedelta(milliseconds=policy.timeout_ms)


@checked_keywords()
@dataclass(frozen=True)
class IdStorePolicy:
    """Per job: how ids are windowed, how long they are kept and how the filters are sized."""

    window_seconds: int = 3600
    allowed_lateness_seconds: int = 3600
    expected_ids_per_window: int = 100_000
    false_positive_rate: float = 0.01

    def __post_init__(self) -> None:
        if self.window_seconds < 1:
            raise ValueError(f"id store window_seconds must be >= 1, got {self.window_seconds}")
        if self.allowed_lateness_seconds < 0:
            raise ValueError(f"id store allowed_lateness_seconds must be >= 0, got {self.allowed_lateness_seconds}")
        if self.expected_ids_per_window < 1:
            raise ValueError(f"id store expected_ids_per_window must be >= 1, got {self.expected_ids_per_window}")
        if not 0 < self.false_positive_rate < 1:
            raise ValueError(f"id store false_positive_rate must be in (0, 1), got {self.false_positive_rate}")
