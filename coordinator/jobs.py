"""The registered jobs: their graphs, sinks and policies (no Spark here).

A job definition says what the execution graph is and which SQL sink table it
writes; its Spark operators live in ``spark_jobs.operators.<kind>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.errors import UnknownJobError
from coordinator.graph import Edge, ExecutionGraph, JobGraph, Operator, OperatorKind, Partitioning
from coordinator.policy import CheckpointPolicy


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

    @property
    def execution_graph(self) -> ExecutionGraph:
        return self.graph.to_execution_graph()

    @property
    def parallelism(self) -> int:
        return self.graph.operator(self.state_operator).parallelism


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


REGISTRY: dict[str, JobDefinition] = {job.name: job for job in (wordcount(),)}


def get_job(name: str) -> JobDefinition:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownJobError(name, sorted(REGISTRY)) from None
