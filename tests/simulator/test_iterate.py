"""The iterate construct: a loop declared in the job API is found as the one back-edge by the DFS."""

from __future__ import annotations

import pytest

from coordinator.dataflow.graph import Edge, GraphError, JobGraph, Operator, OperatorKind, Partitioning
from coordinator.dataflow.iterate import LoopStep, check_loop, iterate
from absreplay_examples.definitions import connected_components, wordcount

K = OperatorKind


def loop_graph(declare_tail_first: bool = False, extra: tuple[Edge, ...] = ()):
    loop = iterate(
        head=Operator("head", K.ITERATE_HEAD, 2),
        body=[LoopStep(Operator("step", K.MAP, 2)), LoopStep(Operator("spread", K.FLAT_MAP, 3), Partitioning.HASH)],
        tail=LoopStep(Operator("tail", K.ITERATE_TAIL, 2), Partitioning.HASH),
        feedback=Partitioning.HASH,
    )
    ops = loop.operators[::-1] if declare_tail_first else loop.operators
    graph = JobGraph(
        operators=(Operator("src", K.SOURCE, 2), *ops, Operator("sink", K.SINK, 1)),
        edges=(Edge("src", "head", Partitioning.HASH), *loop.edges, Edge("head", "sink", Partitioning.HASH), *extra),
    )
    return graph, loop


@pytest.mark.parametrize("declare_tail_first", [False, True])
def test_the_loops_feedback_edge_is_the_only_back_edge_and_the_rest_is_a_dag(declare_tail_first: bool) -> None:
    graph, loop = loop_graph(declare_tail_first)
    check_loop(graph, loop)
    eg = graph.to_execution_graph()
    assert eg.back_edges == {loop.back_edge} == {Edge("tail", "head", Partitioning.HASH)}
    # G \ L is a DAG: its topological order puts the head before its body and the tail
    assert eg.order.index("src") < eg.order.index("head") < eg.order.index("step") < eg.order.index("tail")
    assert [(e.source, e.target) for e in loop.edges] == [
        ("head", "step"), ("step", "spread"), ("spread", "tail"), ("tail", "head")
    ]
    back = [c for c in eg.channels if c.back_edge]
    assert len(back) == 4 and {c.target.operator for c in back} == {"head"}


def test_a_second_cycle_through_the_body_is_refused() -> None:
    graph, loop = loop_graph(extra=(Edge("spread", "src2", Partitioning.HASH), Edge("src2", "head", Partitioning.HASH)))
    graph = JobGraph(operators=(*graph.operators, Operator("src2", K.MAP, 2)), edges=graph.edges)
    with pytest.raises(GraphError, match="exactly one back-edge tail->head; the graph's DFS finds: .*->"):
        check_loop(graph, loop)


def test_loop_operators_must_have_the_loop_kinds() -> None:
    with pytest.raises(GraphError, match="loop head 'h' must be an iterate_head"):
        iterate(Operator("h", K.MAP, 1), [], LoopStep(Operator("t", K.ITERATE_TAIL, 1)))
    with pytest.raises(GraphError, match="loop tail 't' must be an iterate_tail"):
        iterate(Operator("h", K.ITERATE_HEAD, 1), [], LoopStep(Operator("t", K.MAP, 1)))
    with pytest.raises(GraphError, match="loop body operator 'b' cannot be a source"):
        iterate(Operator("h", K.ITERATE_HEAD, 1), [LoopStep(Operator("b", K.SOURCE, 1))],
                LoopStep(Operator("t", K.ITERATE_TAIL, 1)))


def test_connected_components_declares_its_loop_with_iterate() -> None:
    job = connected_components(parallelism=3, loop_rounds=2)
    eg = job.execution_graph
    assert eg.back_edges == {Edge("feedback", "labels", Partitioning.FORWARD)}
    assert eg.order == ("source", "parse", "labels", "propagate", "feedback", "sink")
    assert (job.loop_tail, job.state_operator, job.loop_rounds, job.sinks[0].declaration.table) == ("feedback", "labels", 2, "cc_labels")
    assert len(eg.tasks) == 18
    assert wordcount().loop_tail is None
    with pytest.raises(ValueError, match="loop_rounds must be >= 1"):
        connected_components(loop_rounds=0)
