"""The ``iterate`` construct of the job API: a loop head, a body, a loop tail and the back-edge.

A job declares a loop with ``iterate(head, body, tail)``; the result carries
the loop's operators and edges (head -> body... -> tail, then tail -> head).
Nothing marks the last edge as special: the execution graph finds it as a
back-edge by DFS (``coordinator.dataflow.graph.find_back_edges``), as the paper's
cyclic graphs do, and ``check_loop`` refuses a job graph in which that analysis does not
find exactly the loop's feedback edge (for instance a body that also feeds an
operator upstream of the head, which would make another cycle).

Inside an epoch the loop runs a bounded number of rounds; what is still on
the back-edge when the epoch ends is the back-edge log of the checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.dataflow.graph import Edge, GraphError, JobGraph, Operator, OperatorKind, Partitioning


@dataclass(frozen=True)
class LoopStep:
    """An operator inside the loop, and how records reach it from the previous one."""

    operator: Operator
    partitioning: Partitioning = Partitioning.FORWARD


@dataclass(frozen=True)
class Loop:
    head: Operator
    body: tuple[LoopStep, ...]
    tail: LoopStep
    #: how the tail's records return to the head
    feedback: Partitioning

    @property
    def operators(self) -> tuple[Operator, ...]:
        return (self.head, *(step.operator for step in self.body), self.tail.operator)

    @property
    def back_edge(self) -> Edge:
        return Edge(self.tail.operator.name, self.head.name, self.feedback)

    @property
    def edges(self) -> tuple[Edge, ...]:
        """The loop's forward edges, head to tail, then the back-edge."""
        steps = (*self.body, self.tail)
        names = [op.name for op in self.operators]
        forward = tuple(Edge(a, b, step.partitioning) for a, b, step in zip(names, names[1:], steps))
        return (*forward, self.back_edge)


def iterate(
    head: Operator,
    body: Sequence[LoopStep],
    tail: LoopStep,
    feedback: Partitioning = Partitioning.FORWARD,
) -> Loop:
    """Declare a loop: ``head`` receives the loop's input and the tail's feedback."""
    if head.kind is not OperatorKind.ITERATE_HEAD:
        raise GraphError(f"loop head {head.name!r} must be an {OperatorKind.ITERATE_HEAD} operator, not {head.kind}")
    if tail.operator.kind is not OperatorKind.ITERATE_TAIL:
        raise GraphError(
            f"loop tail {tail.operator.name!r} must be an {OperatorKind.ITERATE_TAIL} operator, not {tail.operator.kind}"
        )
    for step in body:
        if step.operator.kind in (OperatorKind.ITERATE_HEAD, OperatorKind.ITERATE_TAIL, OperatorKind.SOURCE):
            raise GraphError(f"loop body operator {step.operator.name!r} cannot be a {step.operator.kind}")
    return Loop(head, tuple(body), tail, feedback)


def check_loop(graph: JobGraph, loop: Loop) -> None:
    """The DFS of the execution graph must find the loop's feedback edge, and only it, as a back-edge."""
    found = graph.to_execution_graph().back_edges
    if found != frozenset({loop.back_edge}):
        described = ", ".join(sorted(f"{e.source}->{e.target}" for e in found)) or "none"
        raise GraphError(
            f"the loop {loop.head.name}..{loop.tail.operator.name} must have exactly one back-edge "
            f"{loop.back_edge.source}->{loop.back_edge.target}; the graph's DFS finds: {described}"
        )


def loop_of(graph: JobGraph) -> Edge | None:
    """The one back-edge of a graph with a loop (None for an acyclic graph)."""
    back = graph.to_execution_graph().back_edges
    if len(back) > 1:
        raise GraphError(f"jobs with more than one loop are not supported; back-edges: {sorted(back, key=str)}")
    return next(iter(back), None)
