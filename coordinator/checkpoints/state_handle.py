"""What a task acks a checkpoint with: where its snapshot lives and what it holds (a ``task_acks`` row)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StateHandle:
    """What a task acks with: where its snapshot lives and what it holds."""

    operator: str
    subtask: int
    state_uri: str | None = None
    base_checkpoint_id: int | None = None
    state_bytes: int = 0
    state_rows: int = 0
    checksum: str | None = None
    alignment_ms: int = 0
    sync_ms: int = 0
    async_ms: int = 0
    watermark: int | None = None
    #: a local store's task: "hit" or "reload" (``spark_jobs.state.stores.loader``), and the reload's milliseconds
    store_event: str | None = None
    store_load_ms: int = 0
    #: the executor it ran on (``executor_<host>_<id>``), which holds the store now
    store_location: str | None = None
    #: keys the operator's state TTL dropped in this subtask in the checkpoint's epoch (``coordinator.dataflow.ttl``)
    keys_dropped: int = 0

    @property
    def task(self) -> str:
        return f"{self.operator}#{self.subtask}"


def handle_columns(h: StateHandle) -> dict:
    """The ``task_acks`` columns of an ack."""
    return {
        "operator": h.operator,
        "subtask": h.subtask,
        "state_uri": h.state_uri,
        "base_checkpoint_id": h.base_checkpoint_id,
        "state_bytes": h.state_bytes,
        "state_rows": h.state_rows,
        "checksum": h.checksum,
        "alignment_ms": h.alignment_ms,
        "sync_ms": h.sync_ms,
        "async_ms": h.async_ms,
        "watermark": h.watermark,
        "store_event": h.store_event,
        "store_load_ms": h.store_load_ms,
        "store_location": h.store_location,
        "keys_dropped": h.keys_dropped,
    }
