"""The task-level snapshot algorithms: what a task does when barrier n arrives on a channel.

One set of rules per snapshot mode, applied by one protocol class:

- ``aligned`` is the paper's Algorithm 1: block each input on its barrier; when
  barriers from all inputs arrived, copy the state, broadcast the barrier and
  unblock. On a cyclic graph it deadlocks (the loop head waits for a barrier on
  its back-edge that it has not sent yet), which is why Algorithm 2 exists.
- ``cyclic`` is Algorithm 2: align on the regular (non-back-edge) inputs only;
  after the state copy, log the records arriving on each back-edge until that
  back-edge's barrier comes back; the log is part of the snapshot.
- ``unaligned`` (Flink's unaligned checkpoints, i.e. Chandy-Lamport): the first
  barrier triggers the copy; the barrier overtakes queued output records, and
  those plus every record received on an input before its barrier are stored.
- ``at_least_once`` (Flink's barrier tracker): never block; copy the state when
  the last regular barrier arrives, so post-barrier records may be in it.
- ``sync`` has no barriers in channels: the run loop stops the world instead.
- ``weak`` (seed 003) is weak consistency (loses records on failure; not
  exactly-once): no barriers in channels either; the run loop triggers each
  stateful task's own snapshot and restarts a failed task alone (``weak``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from coordinator.dataflow.graph import Channel
from coordinator.simulator.channels import Barrier, Record
from coordinator.simulator.snapshot import TaskSnapshot
from coordinator.simulator.tasks import RunningTask


class SnapshotMode(StrEnum):
    """The snapshot algorithms; all but ``WEAK`` restore a global snapshot and are exactly-once
    (``AT_LEAST_ONCE`` aside). ``WEAK`` is weak consistency (loses records on failure; not
    exactly-once), opt-in: nothing defaults to it."""

    ALIGNED = "aligned"
    CYCLIC = "cyclic"
    UNALIGNED = "unaligned"
    AT_LEAST_ONCE = "at_least_once"
    SYNC = "sync"
    WEAK = "weak"  # weak consistency (loses records on failure; not exactly-once)


class Trigger(StrEnum):
    """When a task copies its state for checkpoint n."""

    ALL_INPUTS = "all_inputs"
    REGULAR_INPUTS = "regular_inputs"
    FIRST_BARRIER = "first_barrier"


class LogScope(StrEnum):
    """Which inputs a task logs between its state copy and their barrier."""

    NONE = "none"
    BACK_EDGES = "back_edges"
    ALL_INPUTS = "all_inputs"


@dataclass(frozen=True)
class Rules:
    trigger: Trigger
    blocks: bool
    logs: LogScope
    overtakes: bool
    # Algorithm 2 as printed (line 25) logs a back-edge until barriers came back
    # on *all* back-edges, so a head with several back-edge channels also logs
    # post-barrier records of the channels that are done; False is the fix
    # (stop per channel, as Chandy-Lamport does), kept switchable to show why.
    log_until_all_back_edges: bool = False


RULES: dict[SnapshotMode, Rules] = {
    SnapshotMode.ALIGNED: Rules(
        Trigger.ALL_INPUTS, blocks=True, logs=LogScope.NONE, overtakes=False
    ),
    SnapshotMode.CYCLIC: Rules(
        Trigger.REGULAR_INPUTS, blocks=True, logs=LogScope.BACK_EDGES, overtakes=False
    ),
    SnapshotMode.UNALIGNED: Rules(
        Trigger.FIRST_BARRIER, blocks=False, logs=LogScope.ALL_INPUTS, overtakes=True
    ),
    SnapshotMode.AT_LEAST_ONCE: Rules(
        Trigger.REGULAR_INPUTS, blocks=False, logs=LogScope.NONE, overtakes=False
    ),
}


@dataclass
class Alignment:
    """A task's progress on one checkpoint: the paper's ``marked``, ``state_copy`` and ``backup_log``."""

    checkpoint_id: int
    marked: set[Channel] = field(default_factory=set)
    state_copy: dict | None = None
    logging: frozenset[Channel] = frozenset()
    log: dict[Channel, list[Record]] = field(default_factory=dict)
    overtaken: dict[Channel, tuple[Record, ...]] = field(default_factory=dict)

    @property
    def copied(self) -> bool:
        return self.state_copy is not None


class SnapshotProtocol:
    """One mode's rules applied at one task; yields the task's snapshot once checkpoint n is complete."""

    def __init__(self, task: RunningTask, rules: Rules) -> None:
        self.task = task
        self.rules = rules
        # several checkpoints can be in progress at a loop head: n+1 may align
        # on the regular inputs while n still waits for its back-edge barriers
        self.alignments: dict[int, Alignment] = {}
        # inputs that delivered barrier n before the state copy of n (the paper's blocked_inputs)
        self.blocked: set[Channel] = set()

    def is_blocked(self, channel: Channel) -> bool:
        return channel in self.blocked

    def inject(self, barrier: Barrier) -> TaskSnapshot:
        """A source reaching barrier n in its input: the barrier arrives on the paper's Nil channel."""
        state = self.task.copy_state()
        overtaken = self.task.broadcast(barrier, overtake=self.rules.overtakes)
        return TaskSnapshot(barrier.checkpoint_id, self.task.name, state, overtaken=overtaken)

    def on_barrier(self, barrier: Barrier, channel: Channel) -> TaskSnapshot | None:
        n = barrier.checkpoint_id
        alignment = self.alignments.setdefault(n, Alignment(n))
        alignment.marked.add(channel)
        if not alignment.copied and self._triggered(alignment):
            self._copy_and_forward(alignment, barrier)
        self.blocked = self._blocked_inputs()
        if alignment.marked != set(self.task.inputs):
            return None
        del self.alignments[n]
        assert alignment.state_copy is not None, "every trigger fires at the latest on the last barrier"
        log = {c: tuple(records) for c, records in alignment.log.items() if records}
        if self.rules.logs is LogScope.BACK_EDGES:
            return TaskSnapshot(n, self.task.name, alignment.state_copy, back_edge_log=log)
        return TaskSnapshot(
            n, self.task.name, alignment.state_copy, received_in_flight=log, overtaken=alignment.overtaken
        )

    def on_record(self, record: Record, channel: Channel) -> None:
        for alignment in self.alignments.values():
            if channel in alignment.logging and (
                channel not in alignment.marked or self.rules.log_until_all_back_edges
            ):
                alignment.log.setdefault(channel, []).append(record)
        self.task.process(record, channel)

    def _blocked_inputs(self) -> set[Channel]:
        if not self.rules.blocks:
            return set()
        return {c for a in self.alignments.values() if not a.copied for c in a.marked}

    def _triggered(self, alignment: Alignment) -> bool:
        if self.rules.trigger is Trigger.FIRST_BARRIER:
            return True
        if self.rules.trigger is Trigger.REGULAR_INPUTS:
            return alignment.marked >= self.task.regular_inputs
        return alignment.marked >= set(self.task.inputs)

    def _copy_and_forward(self, alignment: Alignment, barrier: Barrier) -> None:
        alignment.state_copy = self.task.copy_state()
        if self.rules.logs is LogScope.BACK_EDGES:
            alignment.logging = self.task.loop_inputs
        elif self.rules.logs is LogScope.ALL_INPUTS:
            alignment.logging = frozenset(self.task.inputs)
        alignment.overtaken = self.task.broadcast(barrier, overtake=self.rules.overtakes)
