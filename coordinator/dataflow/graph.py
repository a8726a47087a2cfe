"""Job graph -> execution graph G = (T, E), with back-edges L found by DFS.

A job graph is operators and edges between them. The execution graph expands
every operator into its subtasks (the tasks that ack a checkpoint) and every
edge into channels according to its partitioning: ``forward`` links subtask i
to subtask i (equal parallelism), ``hash`` and ``broadcast`` link every
upstream subtask to every downstream one. Back-edges are the edges that reach
an operator on the current DFS stack; G without them must be a DAG, and its
topological order is the order in which operators run inside an epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class OperatorKind(StrEnum):
    """The kinds of operator, one vocabulary from the declaration (``api``'s methods) to the execution graph
    and the simulator; a declared loop (``ITERATE``) runs as a head, its body and a tail."""

    SOURCE = "source"
    MAP = "map"
    FLAT_MAP = "flat_map"
    FILTER = "filter"
    AGGREGATE = "aggregate"
    PROCESS = "process"
    WINDOW = "window"
    JOIN = "join"
    INTERVAL_JOIN = "interval_join"
    ITERATE = "iterate"
    ITERATE_HEAD = "iterate_head"
    ITERATE_TAIL = "iterate_tail"
    SINK = "sink"


STATELESS_KINDS = frozenset({OperatorKind.MAP, OperatorKind.FILTER, OperatorKind.FLAT_MAP})
#: the keyed operators a job declares (their state: ``dataflow.jobs.StateSpec``)
KEYED_KINDS = frozenset({OperatorKind.AGGREGATE, OperatorKind.PROCESS, OperatorKind.WINDOW, OperatorKind.JOIN,
                         OperatorKind.INTERVAL_JOIN})
#: the operators of the execution graph whose tasks hold something a checkpoint records
STATEFUL_KINDS = frozenset({OperatorKind.SOURCE, *KEYED_KINDS, OperatorKind.ITERATE_HEAD, OperatorKind.SINK})


class Partitioning(StrEnum):
    FORWARD = "forward"
    HASH = "hash"
    BROADCAST = "broadcast"


@dataclass(frozen=True)
class Operator:
    name: str
    kind: OperatorKind
    parallelism: int

    @property
    def is_stateful(self) -> bool:
        return self.kind in STATEFUL_KINDS


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    partitioning: Partitioning


@dataclass(frozen=True)
class Task:
    """One operator instance: (operator, subtask index)."""

    operator: str
    subtask: int

    @property
    def name(self) -> str:
        return f"{self.operator}#{self.subtask}"


@dataclass(frozen=True)
class Channel:
    source: Task
    target: Task
    back_edge: bool


class GraphError(ValueError):
    """The job graph is malformed."""


@dataclass(frozen=True)
class JobGraph:
    operators: tuple[Operator, ...]
    edges: tuple[Edge, ...]

    def operator(self, name: str) -> Operator:
        for op in self.operators:
            if op.name == name:
                return op
        raise GraphError(f"no operator named {name!r}")

    def to_execution_graph(self) -> ExecutionGraph:
        names = [op.name for op in self.operators]
        if len(set(names)) != len(names):
            raise GraphError("operator names must be unique")
        for op in self.operators:
            if op.parallelism < 1:
                raise GraphError(f"operator {op.name!r} needs parallelism >= 1")
        for e in self.edges:
            src, dst = self.operator(e.source), self.operator(e.target)
            if e.partitioning is Partitioning.FORWARD and src.parallelism != dst.parallelism:
                raise GraphError(
                    f"forward edge {e.source}->{e.target} joins parallelism "
                    f"{src.parallelism} to {dst.parallelism}"
                )
        back = find_back_edges(self)
        return ExecutionGraph(job_graph=self, back_edges=back, order=topological_order(self, back))


def _successors(graph: JobGraph) -> dict[str, list[Edge]]:
    out: dict[str, list[Edge]] = {op.name: [] for op in graph.operators}
    for e in graph.edges:
        out[e.source].append(e)
    return out


def find_back_edges(graph: JobGraph) -> frozenset[Edge]:
    """Edges that point to an operator on the current DFS stack (sources first, then the rest)."""
    succ = _successors(graph)
    white, grey, black = 0, 1, 2
    color = {op.name: white for op in graph.operators}
    back: set[Edge] = set()
    roots = [op.name for op in graph.operators if op.kind is OperatorKind.SOURCE]
    roots += [op.name for op in graph.operators if op.kind is not OperatorKind.SOURCE]
    for root in roots:
        if color[root] != white:
            continue
        # iterative DFS: (node, iterator over its out-edges)
        color[root] = grey
        stack = [(root, iter(succ[root]))]
        while stack:
            node, edges = stack[-1]
            edge = next(edges, None)
            if edge is None:
                color[node] = black
                stack.pop()
                continue
            if color[edge.target] == grey:
                back.add(edge)
            elif color[edge.target] == white:
                color[edge.target] = grey
                stack.append((edge.target, iter(succ[edge.target])))
    return frozenset(back)


def topological_order(graph: JobGraph, back_edges: frozenset[Edge]) -> tuple[str, ...]:
    """Kahn's algorithm on G \\ L, ties broken by declaration order (deterministic)."""
    indeg = {op.name: 0 for op in graph.operators}
    forward = [e for e in graph.edges if e not in back_edges]
    for e in forward:
        indeg[e.target] += 1
    position = {op.name: i for i, op in enumerate(graph.operators)}
    ready = sorted((n for n, d in indeg.items() if d == 0), key=position.__getitem__)
    order: list[str] = []
    while ready:
        node = ready.pop(0)
        order.append(node)
        for e in forward:
            if e.source == node:
                indeg[e.target] -= 1
                if indeg[e.target] == 0:
                    ready.append(e.target)
                    ready.sort(key=position.__getitem__)
    if len(order) != len(indeg):
        raise GraphError("the graph without its back-edges still has a cycle")
    return tuple(order)


@dataclass(frozen=True)
class ExecutionGraph:
    job_graph: JobGraph
    back_edges: frozenset[Edge]
    order: tuple[str, ...]
    tasks: tuple[Task, ...] = field(init=False)
    channels: tuple[Channel, ...] = field(init=False)

    def __post_init__(self) -> None:
        ops = {op.name: op for op in self.job_graph.operators}
        tasks = tuple(Task(name, i) for name in self.order for i in range(ops[name].parallelism))
        channels: list[Channel] = []
        for e in self.job_graph.edges:
            src, dst = ops[e.source], ops[e.target]
            is_back = e in self.back_edges
            if e.partitioning is Partitioning.FORWARD:
                pairs = [(i, i) for i in range(src.parallelism)]
            else:
                pairs = [(i, j) for i in range(src.parallelism) for j in range(dst.parallelism)]
            channels += [Channel(Task(e.source, i), Task(e.target, j), is_back) for i, j in pairs]
        object.__setattr__(self, "tasks", tasks)
        object.__setattr__(self, "channels", tuple(channels))

    @property
    def task_names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.tasks)

    def inputs(self, task: Task) -> list[Channel]:
        return [c for c in self.channels if c.target == task]

    def to_json(self) -> dict:
        return {
            "operators": [
                {"name": o.name, "kind": str(o.kind), "parallelism": o.parallelism}
                for o in self.job_graph.operators
            ],
            "edges": [
                {
                    "source": e.source,
                    "target": e.target,
                    "partitioning": str(e.partitioning),
                    "back_edge": e in self.back_edges,
                }
                for e in self.job_graph.edges
            ],
            "order": list(self.order),
        }
