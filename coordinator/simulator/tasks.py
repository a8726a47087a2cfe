"""One running task: its operator state, its output channels and how records are routed to them.

The snapshot protocol (barriers, blocking, logging) is not here but in
``algorithms``; a task only knows how to process a record, copy or restore its
state, and put messages on its output channels.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.dataflow.graph import Channel, Edge, OperatorKind, Partitioning, Task
from coordinator.simulator.channels import Barrier, ChannelQueue, Record
from coordinator.simulator.operators import Route
from coordinator.simulator.semantics import GENERIC, Semantics, hash_partition


@dataclass(frozen=True)
class Output:
    """One output channel with what routing needs: its edge and the target operator's parallelism."""

    queue: ChannelQueue
    edge: Edge
    target_parallelism: int
    #: the subtask a hash edge sends a record to
    partition: Callable[[Record, int], int] = hash_partition

    def accepts(self, route: Route, record: Record) -> bool:
        channel = self.queue.channel
        if route is Route.LOOP and not channel.back_edge:
            return False
        if route is Route.EXIT and channel.back_edge:
            return False
        if self.edge.partitioning is Partitioning.HASH:
            return self.partition(record, self.target_parallelism) == channel.target.subtask
        # forward channels only exist between equal subtask indices; broadcast goes everywhere
        return True


class RunningTask:
    """An operator instance during a simulation."""

    def __init__(
        self, task: Task, kind: OperatorKind, inputs: tuple[Channel, ...], outputs: list[Output],
        semantics: Semantics = GENERIC,
    ) -> None:
        self.task = task
        self.kind = kind
        self.semantics = semantics
        self.inputs = inputs
        self.loop_inputs = frozenset(c for c in inputs if c.back_edge)
        self.regular_inputs = frozenset(c for c in inputs if not c.back_edge)
        self.outputs = outputs
        self.state: dict = semantics.initial_state(kind)

    @property
    def name(self) -> str:
        return self.task.name

    def process(self, record: Record, channel: Channel | None) -> None:
        from_back_edge = channel is not None and channel.back_edge
        for route, out in self.semantics.apply(self.kind, self.state, record, from_back_edge):
            for output in self.outputs:
                if output.accepts(route, out):
                    output.queue.push(out)

    def copy_state(self) -> dict:
        return copy.deepcopy(self.state)

    def restore_state(self, state: dict) -> None:
        self.state = copy.deepcopy(state)

    def broadcast(self, barrier: Barrier, overtake: bool) -> dict[Channel, tuple[Record, ...]]:
        """Send ``barrier`` on every output; with ``overtake``, return the records it jumped, per channel."""
        overtaken: dict[Channel, tuple[Record, ...]] = {}
        for output in self.outputs:
            if overtake:
                jumped = output.queue.overtake(barrier)
                if jumped:
                    overtaken[output.queue.channel] = tuple(jumped)
            else:
                output.queue.push(barrier)
        return overtaken
