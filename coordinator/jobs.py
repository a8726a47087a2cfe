"""The registered jobs: their graphs, sinks and policies (no Spark here).

A job definition says what the execution graph is and which SQL sink table it
writes; its Spark operators live in ``spark_jobs.operators.<kind>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from coordinator.errors import UnknownJobError
from coordinator.graph import Edge, ExecutionGraph, JobGraph, Operator, OperatorKind, Partitioning
from coordinator.iterate import LoopStep, check_loop, iterate, loop_of
from coordinator.policy import CheckpointPolicy, IdStorePolicy
from coordinator.record_formats import RecordFormat


@dataclass(frozen=True)
class JobDefinition:
    name: str
    description: str
    graph: JobGraph
    # the operator whose keyed state is snapshotted to Parquet
    state_operator: str
    sink_operator: str
    sink_table: str
    policy: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    barrier_interval_minutes: int = 5
    # how records of `.jsonl` segments (explicit ids) are deduplicated
    id_store: IdStorePolicy = field(default_factory=IdStorePolicy)
    # which lines are records (the others become dead letters at inject)
    record_format: RecordFormat = RecordFormat.TEXT
    # jobs with an iterate loop: rounds per epoch; what still circulates then is the back-edge log
    loop_rounds: int = 4

    def __post_init__(self) -> None:
        if self.loop_rounds < 1:
            raise ValueError(f"job {self.name!r}: loop_rounds must be >= 1, got {self.loop_rounds}")

    @property
    def execution_graph(self) -> ExecutionGraph:
        return self.graph.to_execution_graph()

    @property
    def loop_tail(self) -> str | None:
        """The operator whose back-edge log is part of every checkpoint (None: the graph is acyclic)."""
        back_edge = loop_of(self.graph)
        return back_edge.source if back_edge else None

    @property
    def parallelism(self) -> int:
        return self.graph.operator(self.state_operator).parallelism

    def with_parallelism(self, parallelism: int) -> JobDefinition:
        """The same job with every operator at ``parallelism``: what a run at another parallelism
        runs (its keyed state is redistributed by key groups on restore)."""
        if parallelism < 1:
            raise ValueError(f"job {self.name!r}: parallelism must be >= 1, got {parallelism}")
        operators = tuple(replace(op, parallelism=parallelism) for op in self.graph.operators)
        return replace(self, graph=replace(self.graph, operators=operators))


def wordcount(parallelism: int = 2) -> JobDefinition:
    """Paper section 3.1: text lines -> words -> count per word -> SQL sink."""
    p = parallelism
    graph = JobGraph(
        operators=(
            Operator("source", OperatorKind.SOURCE, p),
            Operator("tokenize", OperatorKind.FLAT_MAP, p),
            Operator("count", OperatorKind.KEYED_REDUCE, p),
            Operator("sink", OperatorKind.SINK, p),
        ),
        edges=(
            Edge("source", "tokenize", Partitioning.FORWARD),
            Edge("tokenize", "count", Partitioning.HASH),
            Edge("count", "sink", Partitioning.FORWARD),
        ),
    )
    return JobDefinition(
        name="wordcount",
        description="counts words of text lines (paper section 3.1)",
        graph=graph,
        state_operator="count",
        sink_operator="sink",
        sink_table="wordcount_counts",
    )


def connected_components(parallelism: int = 2, loop_rounds: int = 4) -> JobDefinition:
    """DESIGN.md section 8: edge lines -> label propagation through an iterate loop -> SQL sink.

    ``labels`` (the loop head) keeps each vertex's component label and neighbours;
    ``propagate`` sends a lowered label to the neighbours; ``feedback`` (the tail)
    combines the messages per target vertex and returns them to the head."""
    p = parallelism
    loop = iterate(
        head=Operator("labels", OperatorKind.ITERATE_HEAD, p),
        body=[LoopStep(Operator("propagate", OperatorKind.FLAT_MAP, p), Partitioning.FORWARD)],
        tail=LoopStep(Operator("feedback", OperatorKind.ITERATE_TAIL, p), Partitioning.HASH),
        feedback=Partitioning.FORWARD,
    )
    graph = JobGraph(
        operators=(
            Operator("source", OperatorKind.SOURCE, p),
            Operator("parse", OperatorKind.FLAT_MAP, p),
            *loop.operators,
            Operator("sink", OperatorKind.SINK, p),
        ),
        edges=(
            Edge("source", "parse", Partitioning.FORWARD),
            Edge("parse", loop.head.name, Partitioning.HASH),
            *loop.edges,
            Edge(loop.head.name, "sink", Partitioning.FORWARD),
        ),
    )
    check_loop(graph, loop)
    return JobDefinition(
        name="connected_components",
        description="connected components of an undirected edge list, by label propagation in a loop",
        graph=graph,
        state_operator=loop.head.name,
        sink_operator="sink",
        sink_table="cc_labels",
        record_format=RecordFormat.EDGES,
        loop_rounds=loop_rounds,
    )


REGISTRY: dict[str, JobDefinition] = {job.name: job for job in (wordcount(), connected_components())}


def get_job(name: str) -> JobDefinition:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownJobError(name, sorted(REGISTRY)) from None
