"""Weak-consistency snapshots (seed 003): weak consistency (loses records on failure; not exactly-once).

No barrier enters a channel and nothing aligns. When every source has passed
cut n (the moment the other modes have injected barrier n at every source),
the JobMaster triggers checkpoint n: each stateful, non-source task copies its
own state at once and acks on its own. A task whose snapshot fails, or that is
down, keeps its previous snapshot; the other tasks' snapshots stand. Sources
are not snapshotted and never rewind.

When a task fails, only it restarts, from its own latest successful snapshot
(its initial state if it has none), after a downtime; the other tasks keep
running and keep their state. Nothing is replayed, so nothing is processed
twice (at-most-once); what the task loses is recorded with its failure: the
records it processed since that snapshot (rolled back), and the records queued
for it when it failed or delivered to it while it was down (dropped).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator.dataflow.graph import STATEFUL_KINDS, Channel, OperatorKind
from coordinator.simulator.channels import Record
from coordinator.simulator.snapshot import SnapshotFails, TaskSnapshot
from coordinator.simulator.tasks import RunningTask


@dataclass
class TaskFailure:
    """One task's failure: the snapshot it restarted from and, in weak mode, the records it lost.

    ``restored`` is the checkpoint id restored (0: none, initial state);
    ``triggered`` the latest checkpoint triggered when the task failed, so
    ``triggered - restored`` is how many checkpoints old the restored state is.
    A global restore (the other modes) loses nothing: both lists stay empty.
    """

    task: str
    step: int
    restored: int
    triggered: int
    rolled_back: tuple[Record, ...] = ()
    dropped: list[Record] = field(default_factory=list)

    @property
    def lost(self) -> tuple[Record, ...]:
        return self.rolled_back + tuple(self.dropped)


@dataclass(frozen=True)
class WeakOutcome:
    """What weak mode's JobMaster recorded: per checkpoint, the tasks whose own snapshot succeeded."""

    snapshotting: frozenset[str]
    acks: dict[int, frozenset[str]]
    latest: dict[str, TaskSnapshot]
    failures: tuple[TaskFailure, ...]


class WeakCheckpointing:
    """Weak mode's JobMaster (trigger, acks) and its single-task restarts, for one simulation."""

    def __init__(self, tasks: Mapping[str, RunningTask], snapshot_fails: SnapshotFails) -> None:
        self.tasks = tasks
        self.snapshot_fails = snapshot_fails
        self.snapshotting = frozenset(
            name for name, t in tasks.items() if t.kind in STATEFUL_KINDS and t.kind is not OperatorKind.SOURCE
        )
        self.acks: dict[int, frozenset[str]] = {}
        self.latest: dict[str, TaskSnapshot] = {}
        self.failures: list[TaskFailure] = []
        # records processed since the task's state was last saved or restored: what a failure rolls back
        self._since_snapshot: dict[str, list[Record]] = {name: [] for name in self.snapshotting}
        # task -> (the step it runs again, the failure its dropped records count against)
        self._down: dict[str, tuple[int, TaskFailure]] = {}

    def trigger(self, checkpoint_id: int, step: int) -> None:
        acked = set()
        for name in sorted(self.snapshotting):
            if self._failure_if_down(name, step) is not None or self.snapshot_fails(checkpoint_id, name):
                continue
            self.latest[name] = TaskSnapshot(checkpoint_id, name, self.tasks[name].copy_state())
            self._since_snapshot[name].clear()
            acked.add(name)
        self.acks[checkpoint_id] = frozenset(acked)

    def deliver(self, name: str, record: Record, channel: Channel, step: int) -> None:
        """``record`` arrives at task ``name``: processed, or lost if the task is down."""
        failure = self._failure_if_down(name, step)
        if failure is not None:
            failure.dropped.append(record)
            return
        if name in self._since_snapshot:
            self._since_snapshot[name].append(record)
        self.tasks[name].process(record, channel)

    def fail(self, name: str, step: int, downtime: int, queued: list[Record], triggered: int) -> TaskFailure:
        """Task ``name`` dies at ``step`` with ``queued`` in its input buffer and runs again after ``downtime``."""
        task = self.tasks[name]
        snapshot = self.latest.get(name)
        task.restore_state(snapshot.state if snapshot else task.semantics.initial_state(task.kind))
        rolled_back = tuple(self._since_snapshot.get(name, ()))
        if name in self._since_snapshot:
            self._since_snapshot[name] = []
        failure = TaskFailure(name, step, snapshot.checkpoint_id if snapshot else 0, triggered, rolled_back, queued)
        self.failures.append(failure)
        self._down[name] = (step + downtime, failure)
        return failure

    def outcome(self) -> WeakOutcome:
        return WeakOutcome(self.snapshotting, dict(self.acks), dict(self.latest), tuple(self.failures))

    def _failure_if_down(self, name: str, step: int) -> TaskFailure | None:
        down = self._down.get(name)
        return down[1] if down is not None and step < down[0] else None
