"""The event-driven run: a seeded scheduler over sources and channels, and restore from a snapshot.

Each step, the scheduler (``random.Random(seed)``) picks one enabled action: a
source emitting its next record or injecting its next barrier, or a non-empty,
non-blocked channel delivering its head message to its target task. The run
ends when nothing is enabled. In ``sync`` mode, sources halt at their barrier;
when every channel has drained, all tasks are snapshotted at once and the
sources resume (the stop-the-world snapshot the paper compares against). In
``weak`` mode (weak consistency: loses records on failure; not exactly-once)
sources pass their cut without a barrier, and once all have passed cut n the
JobMaster of ``weak`` triggers each stateful task's own snapshot; ``fail_task``
then restarts one task alone. ``snapshot_fails`` injects failed task snapshots
in every mode: a global checkpoint with one failed part is declined.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator.dataflow.graph import Channel, ExecutionGraph, JobGraph, OperatorKind
from coordinator.simulator.algorithms import RULES, Rules, SnapshotMode, SnapshotProtocol
from coordinator.simulator.channels import Barrier, ChannelQueue, Record
from coordinator.simulator.errors import SimulationError, SimulationInputError
from coordinator.simulator.semantics import GENERIC, Semantics
from coordinator.simulator.snapshot import GlobalSnapshot, SnapshotFails, TaskSnapshot, no_snapshot_fails
from coordinator.simulator.sources import Cut, SourceCursor, barrier_schedule
from coordinator.simulator.tasks import Output, RunningTask
from coordinator.simulator.weak import TaskFailure, WeakCheckpointing, WeakOutcome

DEFAULT_MAX_STEPS = 1_000_000


@dataclass(frozen=True)
class SimulationResult:
    """How a run ended: final task states, the completed checkpoints, and what never finished."""

    final_states: dict[str, dict]
    snapshots: dict[int, GlobalSnapshot]
    # checkpoint id -> tasks that never completed it (e.g. Algorithm 1 on a cycle)
    incomplete: dict[int, frozenset[str]]
    # channel -> messages never delivered (held by a channel blocked forever)
    stuck: dict[Channel, int]
    steps: int
    # checkpoint id -> tasks whose snapshot failed (injected), so the checkpoint never completed
    declined: dict[int, frozenset[str]] = field(default_factory=dict)
    # the latest checkpoint whose cut every source has passed
    triggered: int = 0
    # weak mode only: the tasks' own snapshots and restarts
    weak: WeakOutcome | None = None

    @property
    def terminated(self) -> bool:
        return not self.incomplete and not self.stuck


class Simulation:
    """One run of an execution graph over finite source inputs with barriers at the given cuts.

    ``inputs`` maps a source task name (``"src#0"``) to its records (ints, or
    whatever ``semantics`` makes records of); ``cuts`` maps checkpoint id n to
    the position of barrier n in every source task. ``restore_from`` starts from
    a global snapshot instead of empty state. ``snapshot_fails`` says which
    task snapshots fail (none by default). With ``channel_capacity`` a task
    acts (a source emits, any other task takes its next message) only while
    each of its output channels holds fewer messages than that: backpressure,
    as bounded network buffers give. Without it sources run far ahead of their
    readers. On a cycle bounded channels can deadlock, as Flink's iterations
    can: the run then ends with stuck channels.
    """

    def __init__(
        self,
        graph: JobGraph | ExecutionGraph,
        inputs: Mapping[str, Sequence[Any]],
        cuts: Mapping[int, Cut] | None = None,
        mode: SnapshotMode = SnapshotMode.CYCLIC,
        seed: int = 0,
        *,
        restore_from: GlobalSnapshot | None = None,
        drop_back_edge_logs: bool = False,
        rules: Rules | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        semantics: Semantics = GENERIC,
        snapshot_fails: SnapshotFails = no_snapshot_fails,
        channel_capacity: int | None = None,
    ) -> None:
        self.graph = graph if isinstance(graph, ExecutionGraph) else graph.to_execution_graph()
        self.semantics = semantics
        _check_simulable(self.graph)
        self.mode = SnapshotMode(mode)
        self.snapshot_fails = snapshot_fails
        # sync and weak put no barrier in any channel, so the task-level rules never fire there
        self.rules = rules if rules is not None else RULES.get(self.mode, RULES[SnapshotMode.ALIGNED])
        self.rng = random.Random(seed)
        self.max_steps = max_steps
        self.channel_capacity = channel_capacity
        self.cuts = dict(cuts or {})
        self._non_empty: set[int] = set()
        self.queues = [ChannelQueue(c, i, self._non_empty) for i, c in enumerate(self.graph.channels)]
        self.tasks = self._build_tasks()
        self.protocols = {name: SnapshotProtocol(task, self.rules) for name, task in self.tasks.items()}
        self._receivers = [(q, self.protocols[q.channel.target.name]) for q in self.queues]
        self.weak = WeakCheckpointing(self.tasks, snapshot_fails) if self.mode is SnapshotMode.WEAK else None
        if self.weak is not None and restore_from is not None:
            raise SimulationInputError("weak mode restarts single tasks (fail_task), never from a global snapshot")
        sources = [t.name for t in self.graph.tasks if self.tasks[t.name].kind is OperatorKind.SOURCE]
        starts = {name: 0 for name in sources}
        if restore_from is not None:
            self._restore(restore_from, drop_back_edge_logs)
            starts = dict(restore_from.source_positions)
            if any(n <= restore_from.checkpoint_id for n in self.cuts):
                raise SimulationInputError(
                    f"a run restored from checkpoint {restore_from.checkpoint_id} "
                    "can only inject later barriers"
                )
        schedule = barrier_schedule(sources, inputs, self.cuts, starts)
        self.cursors = [
            SourceCursor(name, inputs.get(name, ()), starts[name], schedule[name], semantics.source_record)
            for name in sources
        ]
        # weak mode takes no global snapshot, so there is nothing to assemble
        self._parts: dict[int, dict[str, TaskSnapshot]] = {n: {} for n in self.cuts} if self.weak is None else {}
        self._declined: dict[int, set[str]] = {}
        self._passed: dict[int, int] = {}  # checkpoint id -> sources past its cut
        self.triggered = 0
        self.snapshots: dict[int, GlobalSnapshot] = {}
        self.steps = 0

    def _build_tasks(self) -> dict[str, RunningTask]:
        job = self.graph.job_graph
        edges = {(e.source, e.target): e for e in job.edges}
        outputs: dict[str, list[Output]] = {t.name: [] for t in self.graph.tasks}
        for queue in self.queues:
            c = queue.channel
            edge = edges[(c.source.operator, c.target.operator)]
            parallelism = job.operator(c.target.operator).parallelism
            outputs[c.source.name].append(Output(queue, edge, parallelism, self.semantics.partition))
        return {
            t.name: RunningTask(
                t, job.operator(t.operator).kind, tuple(self.graph.inputs(t)), outputs[t.name], self.semantics
            )
            for t in self.graph.tasks
        }

    def _restore(self, snapshot: GlobalSnapshot, drop_back_edge_logs: bool) -> None:
        if set(snapshot.task_states) != set(self.tasks):
            raise SimulationInputError("the snapshot's tasks are not this graph's tasks")
        for name, state in snapshot.task_states.items():
            self.tasks[name].restore_state(state)
        by_channel = {q.channel: q for q in self.queues}
        # Section 5 of the paper: logged records are processed before new input
        for channel, records in snapshot.replay(include_back_edge_logs=not drop_back_edge_logs).items():
            if channel not in by_channel:
                raise SimulationInputError(f"the snapshot logs records for an unknown channel {channel}")
            for record in records:
                by_channel[channel].push(record)

    def _enabled(self) -> list[tuple[bool, int]]:
        """(is_source, index) of every action that may happen next, in a fixed order."""
        actions: list[tuple[bool, int]] = []
        sync = self.mode is SnapshotMode.SYNC
        for i, cursor in enumerate(self.cursors):
            if not cursor.done and not (sync and cursor.at_barrier) and not self._backpressured(cursor.task_name):
                actions.append((True, i))
        for j in sorted(self._non_empty):
            queue, receiver = self._receivers[j]
            if not receiver.is_blocked(queue.channel) and not self._backpressured(queue.channel.target.name):
                actions.append((False, j))
        return actions

    def _backpressured(self, task_name: str) -> bool:
        limit = self.channel_capacity
        return limit is not None and any(len(o.queue) >= limit for o in self.tasks[task_name].outputs)

    def step(self) -> bool:
        """Perform one scheduled action; False when nothing can happen any more."""
        actions = self._enabled()
        if not actions:
            return self.mode is SnapshotMode.SYNC and self._stop_the_world()
        if self.steps >= self.max_steps:
            raise SimulationError(f"no end after {self.max_steps} steps; an operator keeps emitting records")
        self.steps += 1
        is_source, index = self.rng.choice(actions)
        if is_source:
            self._emit(self.cursors[index])
        else:
            self._deliver(self.queues[index])
        return True

    def _emit(self, cursor: SourceCursor) -> None:
        event = cursor.next_event()
        cursor.advance()
        if isinstance(event, Barrier):
            self._passed_cut(event.checkpoint_id)
            if self.weak is None:
                self._collect(self.protocols[cursor.task_name].inject(event))
        elif event is not None:
            self.tasks[cursor.task_name].process(event, None)

    def _passed_cut(self, checkpoint_id: int) -> None:
        """One more source passed the cut of ``checkpoint_id``; the last one triggers it."""
        self._passed[checkpoint_id] = self._passed.get(checkpoint_id, 0) + 1
        if self._passed[checkpoint_id] == len(self.cursors):
            self.triggered = checkpoint_id
            if self.weak is not None:
                self.weak.trigger(checkpoint_id, self.steps)

    def fail_task(self, name: str, downtime: int = 0) -> TaskFailure:
        """Weak mode: task ``name`` dies now, loses its input buffer, and after ``downtime`` steps
        runs again from its own latest snapshot while every other task keeps running."""
        if self.weak is None:
            raise SimulationInputError(
                f"only weak mode restarts a single task; {self.mode} recovers with restore() from a global snapshot"
            )
        if name not in self.tasks or self.tasks[name].kind is OperatorKind.SOURCE:
            raise SimulationInputError(
                f"{name!r} is not a non-source task of this graph: weak mode never rewinds a source"
            )
        queued = [m for q in self.queues if q.channel.target.name == name for m in q.drain() if isinstance(m, Record)]
        return self.weak.fail(name, self.steps, downtime, queued, self.triggered)

    def _deliver(self, queue: ChannelQueue) -> None:
        message = queue.pop()
        if self.weak is not None:
            assert isinstance(message, Record), "weak mode puts no barrier in a channel"
            self.weak.deliver(queue.channel.target.name, message, queue.channel, self.steps)
            return
        protocol = self.protocols[queue.channel.target.name]
        if isinstance(message, Barrier):
            part = protocol.on_barrier(message, queue.channel)
            if part is not None:
                self._collect(part)
        else:
            protocol.on_record(message, queue.channel)

    def _stop_the_world(self) -> bool:
        """All channels are drained and every source waits at barrier n: snapshot every task, resume."""
        waiting = [c.next_event() for c in self.cursors]
        barriers = {e.checkpoint_id for e in waiting if isinstance(e, Barrier)}
        if not barriers:
            return False
        (n,) = barriers  # cuts are validated: every source has every barrier, in order
        for name, task in self.tasks.items():
            self._collect(TaskSnapshot(n, name, task.copy_state()))
        for cursor in self.cursors:
            cursor.advance()
            self._passed_cut(n)
        return True

    def _collect(self, part: TaskSnapshot) -> None:
        n = part.checkpoint_id
        if self.snapshot_fails(n, part.task):
            # the task acks a failure: the checkpoint can no longer complete
            self._declined.setdefault(n, set()).add(part.task)
            return
        self._parts[n][part.task] = part
        if len(self._parts[n]) == len(self.tasks):
            sources = frozenset(c.task_name for c in self.cursors)
            self.snapshots[n] = GlobalSnapshot.assemble(n, str(self.mode), self._parts[n], sources)

    def run(self) -> SimulationResult:
        while self.step():
            pass
        return SimulationResult(
            final_states={name: task.copy_state() for name, task in self.tasks.items()},
            snapshots=dict(self.snapshots),
            incomplete={
                n: missing
                for n, parts in self._parts.items()
                if (missing := frozenset(self.tasks) - frozenset(parts) - self._declined.get(n, set()))
            },
            stuck={q.channel: len(q) for q in self.queues if len(q)},
            steps=self.steps,
            declined={n: frozenset(tasks) for n, tasks in self._declined.items()},
            triggered=self.triggered,
            weak=self.weak.outcome() if self.weak is not None else None,
        )


def _check_simulable(graph: ExecutionGraph) -> None:
    job = graph.job_graph
    pairs = [(e.source, e.target) for e in job.edges]
    if len(set(pairs)) != len(pairs):
        raise SimulationInputError(
            "two edges join the same pair of operators; the simulator needs one edge per pair"
        )
    for op in job.operators:
        incoming = [e for e in job.edges if e.target == op.name]
        if op.kind is OperatorKind.SOURCE and incoming:
            raise SimulationInputError(f"source {op.name!r} has input edges")
        if op.kind is not OperatorKind.SOURCE and not [e for e in incoming if e not in graph.back_edges]:
            # no regular input: no barrier ever reaches it, so no snapshot could complete
            raise SimulationInputError(f"operator {op.name!r} has no input edge outside a cycle")


def simulate(
    graph: JobGraph | ExecutionGraph,
    inputs: Mapping[str, Sequence[Any]],
    cuts: Mapping[int, Cut] | None = None,
    mode: SnapshotMode = SnapshotMode.CYCLIC,
    seed: int = 0,
    *,
    semantics: Semantics = GENERIC,
    snapshot_fails: SnapshotFails = no_snapshot_fails,
) -> SimulationResult:
    """Run ``graph`` over ``inputs`` with barrier n at ``cuts[n]`` under ``mode``, to the end."""
    return Simulation(graph, inputs, cuts, mode, seed, semantics=semantics, snapshot_fails=snapshot_fails).run()


def restore(
    graph: JobGraph | ExecutionGraph,
    inputs: Mapping[str, Sequence[Any]],
    snapshot: GlobalSnapshot,
    seed: int = 0,
    *,
    mode: SnapshotMode | None = None,
    cuts: Mapping[int, Cut] | None = None,
    drop_back_edge_logs: bool = False,
    semantics: Semantics = GENERIC,
) -> SimulationResult:
    """Recover from ``snapshot`` (states, source positions, logs replayed first) and run to the end."""
    run_mode = SnapshotMode(mode if mode is not None else snapshot.mode)
    simulation = Simulation(
        graph, inputs, cuts, run_mode, seed, restore_from=snapshot, drop_back_edge_logs=drop_back_edge_logs,
        semantics=semantics,
    )
    return simulation.run()
