"""A run's modes, chosen once when the run is built (``coordinator.modes``: parsed at the edge) and turned
into what the run does differently: where each operator restores from, whether epochs may run together,
which snapshot writer takes the epochs, and what the checkpoints record.

- aligned (exactly once): every operator restores from one checkpoint; the snapshot writer
  (``spark_jobs.run.snapshot``) takes each epoch async, sync or not at all;
- weak (``coordinator.checkpoints.weak``): each operator restores from its own latest snapshot, epochs run one
  at a time, and, unless no snapshot is taken, the sources ack each epoch as they read it and its output goes
  straight into the sinks (``spark_jobs.run.weak_snapshots``).
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator import modes
from coordinator.checkpoints import weak
from coordinator.checkpoints.run_plan import RunPlan
from coordinator.modes import Consistency, SnapshotMode
from spark_jobs.run.snapshot import SnapshotWriter
from spark_jobs.run.weak_snapshots import WeakSnapshotWriter


@dataclass(frozen=True)
class RunStrategy:
    mode: SnapshotMode
    consistency: Consistency

    @property
    def recorded(self) -> str:
        """The snapshot mode the run's checkpoints record (``modes.recorded``)."""
        return modes.recorded(self.mode, self.consistency)

    @property
    def per_operator(self) -> bool:
        """Each operator restores from its own latest snapshot, and epochs run one at a time."""
        return self.consistency == Consistency.WEAK

    @property
    def writes_through(self) -> bool:
        """The sources ack an epoch as they read it and its output goes straight into the sinks."""
        return self.recorded == modes.WEAK_SNAPSHOTS

    @property
    def label(self) -> str:
        """What the run's first line says of it."""
        return f" ({weak.LABEL})" if self.per_operator else ""

    def heads(self, run: RunPlan) -> int | None | dict[str, int | None]:
        """Where each operator's state is: the restore point, or each operator's own head."""
        return run.heads if self.per_operator else run.restore_point

    def writer(self, heads: int | None | dict[str, int | None], **fields: object) -> SnapshotWriter:
        """The snapshot writer of the run (``fields``: ``SnapshotWriter``'s), on the bases ``heads``."""
        if self.writes_through:
            return WeakSnapshotWriter(mode=self.mode, bases=dict(heads), **fields)
        return SnapshotWriter(mode=self.mode, **fields)

    def read(self, writer: SnapshotWriter, checkpoint_id: int) -> None:
        """An epoch about to be read: the sources ack it where they ack as they read (no run reads it again)."""
        if self.writes_through:
            writer.consume(checkpoint_id)

    def durable(self, writer: SnapshotWriter) -> int | None:
        """The newest checkpoint whose snapshot is durable, whose tombstones leave the state (None: a weak
        job's operators each have their own base, so tombstones stay)."""
        return None if self.writes_through else writer.base
