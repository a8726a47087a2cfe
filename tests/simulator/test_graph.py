"""Job graph -> execution graph: tasks, channels, back-edges by DFS, topological order."""

from __future__ import annotations

import pytest

from coordinator.dataflow.graph import Edge, GraphError, JobGraph, Operator, OperatorKind, Partitioning
from absreplay_examples.definitions import wordcount


def test_wordcount_expands_to_tasks_and_channels() -> None:
    eg = wordcount(parallelism=3).execution_graph
    assert eg.order == ("source", "tokenize", "count", "sink")
    assert len(eg.tasks) == 12
    # forward: i -> i; hash: all-to-all
    assert sum(1 for c in eg.channels if c.source.operator == "source") == 3
    assert sum(1 for c in eg.channels if c.source.operator == "tokenize") == 9
    assert not eg.back_edges


def test_loop_edge_is_found_as_back_edge_and_the_rest_is_a_dag() -> None:
    g = JobGraph(
        operators=(
            Operator("src", OperatorKind.SOURCE, 1),
            Operator("head", OperatorKind.ITERATE_HEAD, 2),
            Operator("body", OperatorKind.MAP, 2),
            Operator("tail", OperatorKind.ITERATE_TAIL, 2),
            Operator("sink", OperatorKind.SINK, 1),
        ),
        edges=(
            Edge("src", "head", Partitioning.HASH),
            Edge("head", "body", Partitioning.FORWARD),
            Edge("body", "tail", Partitioning.FORWARD),
            Edge("tail", "head", Partitioning.HASH),
            Edge("tail", "sink", Partitioning.HASH),
        ),
    )
    eg = g.to_execution_graph()
    assert eg.back_edges == frozenset({Edge("tail", "head", Partitioning.HASH)})
    assert eg.order == ("src", "head", "body", "tail", "sink")
    back_channels = [c for c in eg.channels if c.back_edge]
    assert len(back_channels) == 4 and all(c.target.operator == "head" for c in back_channels)


def test_forward_edge_needs_equal_parallelism() -> None:
    g = JobGraph(
        operators=(Operator("a", OperatorKind.SOURCE, 2), Operator("b", OperatorKind.MAP, 3)),
        edges=(Edge("a", "b", Partitioning.FORWARD),),
    )
    with pytest.raises(GraphError, match="forward edge"):
        g.to_execution_graph()


def test_broadcast_connects_every_pair() -> None:
    g = JobGraph(
        operators=(Operator("a", OperatorKind.SOURCE, 2), Operator("b", OperatorKind.MAP, 3)),
        edges=(Edge("a", "b", Partitioning.BROADCAST),),
    )
    assert len(g.to_execution_graph().channels) == 6
