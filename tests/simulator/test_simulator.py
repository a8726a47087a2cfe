"""The snapshot simulator as a test oracle: termination, feasibility and exactly-once restore.

Random execution graphs (2-6 operators, parallelism 1-3, forward / hash /
broadcast edges, optionally one iterate loop), random interleavings (the
scheduler's seed) and random cuts. The reference is always computed without
barriers (``prefix_states`` / ``final_states``), independently of the
algorithm under test.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from random import Random

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from coordinator.dataflow.graph import Edge, JobGraph, Operator, OperatorKind, Partitioning
from coordinator.simulator import (
    RULES,
    Barrier,
    Record,
    Simulation,
    SimulationInputError,
    SnapshotMode,
    final_states,
    prefix_inputs,
    prefix_states,
    restore,
    simulate,
)
from coordinator.simulator.channels import ChannelQueue

K = OperatorKind
MIDDLE_KINDS = [K.MAP, K.FLAT_MAP, K.FILTER, K.AGGREGATE, K.WINDOW, K.PROCESS, K.JOIN]
FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# find() returns the first example found: shrinking it would cost seconds and prove nothing more
SEARCH = settings(max_examples=500, database=None, phases=[Phase.generate])


@dataclass(frozen=True)
class Case:
    graph: JobGraph
    inputs: dict[str, tuple[int, ...]]
    cuts: dict[int, dict[str, int]]
    seed: int

    @property
    def cyclic(self) -> bool:
        return bool(self.graph.to_execution_graph().back_edges)


LOOP_INSIDE = {"head", "body", "tail"}


def _partitioning(draw: st.DrawFn, source: Operator, target: Operator) -> Partitioning:
    # no broadcast between loop operators: it would multiply the records in flight every round
    in_loop = source.name in LOOP_INSIDE and target.name in LOOP_INSIDE
    choices = [Partitioning.HASH] if in_loop else [Partitioning.HASH, Partitioning.BROADCAST]
    if source.parallelism == target.parallelism:
        choices.append(Partitioning.FORWARD)
    return draw(st.sampled_from(choices))


@st.composite
def job_graphs(draw: st.DrawFn, cyclic: bool) -> JobGraph:
    """Sources -> a chain of operators (with an iterate loop block if cyclic) -> sink, plus skip edges."""
    par = st.integers(1, 3)
    sources = [Operator(f"src{i}", K.SOURCE, draw(par)) for i in range(draw(st.integers(1, 2)))]
    loop: list[Operator] = []
    if cyclic:
        body = [Operator("body", draw(st.sampled_from(MIDDLE_KINDS)), draw(par))] if draw(st.booleans()) else []
        loop = [Operator("head", K.ITERATE_HEAD, draw(par)), *body]
        loop.append(Operator("tail", K.ITERATE_TAIL, draw(par)))
    budget = 6 - len(sources) - 1 - len(loop)
    kinds = draw(st.lists(st.sampled_from(MIDDLE_KINDS), max_size=budget))
    chain = [Operator(f"op{i}", kind, draw(par)) for i, kind in enumerate(kinds)]
    at = draw(st.integers(0, len(chain)))
    chain = chain[:at] + loop + chain[at:] + [Operator("sink", K.SINK, draw(par))]
    ops = {op.name: op for op in sources + chain}
    order = [op.name for op in sources + chain]
    pairs = [(s.name, chain[0].name) for s in sources]
    pairs += [(a.name, b.name) for a, b in zip(chain, chain[1:])]
    # skip edges give tasks several inputs; they never enter or leave the inside of the loop
    # (head -> body -> tail), so that the only cycle is the loop and its back-edge is tail -> head
    starts = [name for name in order if name not in {"head", "body", "sink"}]
    for _ in range(draw(st.integers(0, 2))):
        a = draw(st.sampled_from(starts))
        later = order[order.index(a) + 1 :]
        targets = [
            b for b in later if ops[b].kind is not K.SOURCE and b not in {"body", "tail"} and (a, b) not in pairs
        ]
        if targets:
            pairs.append((a, draw(st.sampled_from(targets))))
    if cyclic:
        pairs.append(("tail", "head"))
    edges = tuple(Edge(a, b, _partitioning(draw, ops[a], ops[b])) for a, b in pairs)
    graph = JobGraph(operators=tuple(sources + chain), edges=edges)
    assert {(e.source, e.target) for e in graph.to_execution_graph().back_edges} == (
        {("tail", "head")} if cyclic else set()
    )
    return graph


@st.composite
def cases(draw: st.DrawFn, cyclic: bool | None = None, barriers: int | None = None) -> Case:
    graph = draw(job_graphs(draw(st.booleans()) if cyclic is None else cyclic))
    eg = graph.to_execution_graph()
    source_tasks = [t.name for t in eg.tasks if graph.operator(t.operator).kind is K.SOURCE]
    inputs = {name: tuple(draw(st.lists(st.integers(0, 15), max_size=6))) for name in source_tasks}
    n_barriers = draw(st.integers(1, 2)) if barriers is None else barriers
    positions = {
        name: sorted(draw(st.lists(st.integers(0, len(inputs[name])), min_size=n_barriers, max_size=n_barriers)))
        for name in source_tasks
    }
    cuts = {n: {name: positions[name][n - 1] for name in source_tasks} for n in range(1, n_barriers + 1)}
    return Case(graph, inputs, cuts, draw(st.integers(0, 2**32 - 1)))


def _cases_with_mode(modes: list[SnapshotMode]) -> st.SearchStrategy[tuple[Case, SnapshotMode]]:
    # Algorithm 1 is only defined for acyclic graphs
    return st.sampled_from(modes).flatmap(
        lambda m: st.tuples(cases(cyclic=False if m is SnapshotMode.ALIGNED else None), st.just(m))
    )


def _heads(case: Case) -> set[str]:
    return {t.name for t in case.graph.to_execution_graph().tasks if t.operator == "head"}


# weak mode takes no global snapshot: tests/simulator/test_simulator_weak.py holds it to its own guarantees
GLOBAL_MODES = [m for m in SnapshotMode if m is not SnapshotMode.WEAK]


@FAST
@given(_cases_with_mode(GLOBAL_MODES))
def test_every_checkpoint_terminates_and_the_run_processes_all_input(
    case_mode: tuple[Case, SnapshotMode],
) -> None:
    case, mode = case_mode
    result = simulate(case.graph, case.inputs, case.cuts, mode, case.seed)
    assert result.terminated, (result.incomplete, result.stuck)
    assert set(result.snapshots) == set(case.cuts)
    tasks = {t.name for t in case.graph.to_execution_graph().tasks}
    assert all(set(s.task_states) == tasks for s in result.snapshots.values())
    assert all(result.snapshots[n].source_positions == cut for n, cut in case.cuts.items())
    assert result.final_states == final_states(case.graph, case.inputs)


@FAST
@given(cases(cyclic=False), st.sampled_from([SnapshotMode.ALIGNED, SnapshotMode.CYCLIC, SnapshotMode.SYNC]))
def test_aligned_snapshot_of_an_acyclic_graph_is_the_pre_barrier_prefix(case: Case, mode: SnapshotMode) -> None:
    result = simulate(case.graph, case.inputs, case.cuts, mode, case.seed)
    for n, cut in case.cuts.items():
        snapshot = result.snapshots[n]
        assert snapshot.task_states == prefix_states(case.graph, case.inputs, cut)
        assert not snapshot.back_edge_logs and not snapshot.in_flight


@FAST
@given(_cases_with_mode([SnapshotMode.ALIGNED, SnapshotMode.CYCLIC, SnapshotMode.UNALIGNED, SnapshotMode.SYNC]))
def test_snapshot_with_its_logged_records_is_exactly_the_pre_barrier_prefix(
    case_mode: tuple[Case, SnapshotMode],
) -> None:
    """Feasibility for cycles and unaligned checkpoints: replaying the logs, with no new input, gives the prefix."""
    case, mode = case_mode
    result = simulate(case.graph, case.inputs, case.cuts, mode, case.seed)
    for n, cut in case.cuts.items():
        quiesced = restore(case.graph, prefix_inputs(case.inputs, cut), result.snapshots[n], case.seed + 1)
        assert quiesced.final_states == prefix_states(case.graph, case.inputs, cut)


@FAST
@given(_cases_with_mode([SnapshotMode.ALIGNED, SnapshotMode.CYCLIC, SnapshotMode.UNALIGNED, SnapshotMode.SYNC]))
def test_restore_gives_the_same_final_state_as_a_run_without_failure(
    case_mode: tuple[Case, SnapshotMode],
) -> None:
    case, mode = case_mode
    result = simulate(case.graph, case.inputs, case.cuts, mode, case.seed)
    reference = final_states(case.graph, case.inputs)
    for n in case.cuts:
        later = {m: cut for m, cut in case.cuts.items() if m > n}
        recovered = restore(case.graph, case.inputs, result.snapshots[n], case.seed ^ 0x5EED, cuts=later)
        assert recovered.terminated and set(recovered.snapshots) == set(later)
        assert recovered.final_states == reference


@FAST
@given(cases(cyclic=False))
def test_at_least_once_restore_never_loses_a_record(case: Case) -> None:
    result = simulate(case.graph, case.inputs, case.cuts, SnapshotMode.AT_LEAST_ONCE, case.seed)
    reference = final_states(case.graph, case.inputs)
    for snapshot in result.snapshots.values():
        recovered = restore(case.graph, case.inputs, snapshot, case.seed + 1).final_states
        for task, state in reference.items():
            assert all(recovered[task].get(key, 0) >= value for key, value in state.items()), task


# Two source subtasks merging into one counter: the counter sees src#0's barrier,
# then (at-least-once does not block) src#0's post-barrier records, then src#1's barrier.
MERGE = JobGraph(
    operators=(
        Operator("src", K.SOURCE, 2),
        Operator("count", K.WINDOW, 1),
        Operator("sink", K.SINK, 1),
    ),
    edges=(Edge("src", "count", Partitioning.HASH), Edge("count", "sink", Partitioning.FORWARD)),
)
MERGE_INPUTS = {"src#0": (1, 2, 3, 4), "src#1": (5, 6, 7, 8)}
MERGE_CUT = {1: {"src#0": 1, "src#1": 3}}
MERGE_SEED = 1  # found by search over seeds 0..19: a schedule where src#0 runs ahead of src#1


def _restored_sink_total(mode: SnapshotMode) -> tuple[int, int]:
    result = simulate(MERGE, MERGE_INPUTS, MERGE_CUT, mode, MERGE_SEED)
    recovered = restore(MERGE, MERGE_INPUTS, result.snapshots[1], seed=0).final_states
    return sum(recovered["sink#0"].values()), sum(final_states(MERGE, MERGE_INPUTS)["sink#0"].values())


def test_at_least_once_restore_counts_records_twice() -> None:
    snapshot = simulate(MERGE, MERGE_INPUTS, MERGE_CUT, SnapshotMode.AT_LEAST_ONCE, MERGE_SEED).snapshots[1]
    # records of epoch 2 are already in the counter's state at barrier 1 ...
    assert sum(snapshot.state("count#0").values()) > sum(MERGE_CUT[1].values())
    # ... and the sources replay them after recovery
    counted, records = _restored_sink_total(SnapshotMode.AT_LEAST_ONCE)
    assert records == 8
    assert counted > records


def test_aligned_restore_counts_every_record_once() -> None:
    for mode in (SnapshotMode.ALIGNED, SnapshotMode.CYCLIC, SnapshotMode.UNALIGNED, SnapshotMode.SYNC):
        assert _restored_sink_total(mode) == (8, 8), mode


@FAST
@given(cases(cyclic=True))
def test_dropping_the_back_edge_log_loses_records_and_keeping_it_loses_none(case: Case) -> None:
    result = simulate(case.graph, case.inputs, case.cuts, SnapshotMode.CYCLIC, case.seed)
    reference = final_states(case.graph, case.inputs)
    for snapshot in result.snapshots.values():
        kept = restore(case.graph, case.inputs, snapshot, case.seed + 1).final_states
        dropped = restore(case.graph, case.inputs, snapshot, case.seed, drop_back_edge_logs=True).final_states
        assert kept == reference
        # Flink's iterations drop in-loop records on recovery: each logged record is at least
        # one lost arrival at a loop head (more if it had rounds left to go)
        lost = sum(sum(reference[h].values()) - sum(dropped[h].values()) for h in _heads(case))
        assert lost >= snapshot.back_edge_log_size
        assert (lost > 0) == (snapshot.back_edge_log_size > 0) == (dropped != reference)


def test_some_generated_cycle_has_a_non_empty_back_edge_log_that_recovery_needs() -> None:
    def logs_records(case: Case) -> bool:
        result = simulate(case.graph, case.inputs, case.cuts, SnapshotMode.CYCLIC, case.seed)
        return result.snapshots[1].back_edge_log_size > 0

    case = find(cases(cyclic=True, barriers=1), logs_records, settings=SEARCH, random=Random(0))
    snapshot = simulate(case.graph, case.inputs, case.cuts, SnapshotMode.CYCLIC, case.seed).snapshots[1]
    reference = final_states(case.graph, case.inputs)
    dropped = restore(case.graph, case.inputs, snapshot, drop_back_edge_logs=True).final_states
    assert dropped != reference
    assert restore(case.graph, case.inputs, snapshot).final_states == reference


@FAST
@given(cases())
def test_sync_snapshot_equals_the_aligned_snapshot_for_the_same_cut(case: Case) -> None:
    sync = simulate(case.graph, case.inputs, case.cuts, SnapshotMode.SYNC, case.seed)
    aligned = simulate(case.graph, case.inputs, case.cuts, SnapshotMode.CYCLIC, case.seed + 1)
    for n, cut in case.cuts.items():
        if not case.cyclic:
            assert sync.snapshots[n].task_states == aligned.snapshots[n].task_states
        else:
            # a cyclic aligned snapshot still has records in its back-edge log; sync drained them
            drained = restore(case.graph, prefix_inputs(case.inputs, cut), aligned.snapshots[n])
            assert sync.snapshots[n].task_states == drained.final_states


@FAST
@given(cases(cyclic=True))
def test_algorithm_1_deadlocks_on_a_cycle(case: Case) -> None:
    result = simulate(case.graph, case.inputs, case.cuts, SnapshotMode.ALIGNED, case.seed)
    assert not result.snapshots
    assert _heads(case) <= result.incomplete[min(case.cuts)]


@FAST
@given(cases(cyclic=False))
def test_algorithms_1_and_2_coincide_on_acyclic_graphs(case: Case) -> None:
    one = simulate(case.graph, case.inputs, case.cuts, SnapshotMode.ALIGNED, case.seed)
    two = simulate(case.graph, case.inputs, case.cuts, SnapshotMode.CYCLIC, case.seed)
    assert one.snapshots.keys() == two.snapshots.keys() and one.steps == two.steps
    assert all(one.snapshots[n].task_states == two.snapshots[n].task_states for n in one.snapshots)


def test_unaligned_snapshot_is_not_the_prefix_but_its_in_flight_records_complete_it() -> None:
    def overtakes(case: Case) -> bool:
        snapshot = simulate(case.graph, case.inputs, case.cuts, SnapshotMode.UNALIGNED, case.seed).snapshots[1]
        return snapshot.in_flight_size > 0

    case = find(cases(cyclic=False, barriers=1), overtakes, settings=SEARCH, random=Random(0))
    snapshot = simulate(case.graph, case.inputs, case.cuts, SnapshotMode.UNALIGNED, case.seed).snapshots[1]
    prefix = prefix_states(case.graph, case.inputs, case.cuts[1])
    assert snapshot.task_states != prefix
    assert restore(case.graph, prefix_inputs(case.inputs, case.cuts[1]), snapshot).final_states == prefix


# A loop head with two back-edge channels (tail#0 and tail#1 both feed head#0).
TWO_BACK_EDGES = JobGraph(
    operators=(
        Operator("src", K.SOURCE, 1),
        Operator("head", K.ITERATE_HEAD, 1),
        Operator("tail", K.ITERATE_TAIL, 2),
        Operator("sink", K.SINK, 1),
    ),
    edges=(
        Edge("src", "head", Partitioning.FORWARD),
        Edge("head", "tail", Partitioning.HASH),
        Edge("tail", "head", Partitioning.HASH),
        Edge("tail", "sink", Partitioning.HASH),
    ),
)
TWO_BACK_EDGES_INPUTS = {"src#0": (1, 3, 5, 7, 9, 11, 2, 4)}
TWO_BACK_EDGES_CUT = {1: {"src#0": 3}}
# found by search: tail#0's barrier comes back to head#0 before tail#1's, with records behind it
TWO_BACK_EDGES_SEED = 1


def test_algorithm_2_as_printed_logs_post_barrier_records_and_restore_duplicates_them() -> None:
    """Line 25 logs a back-edge until *all* back-edge barriers came back; per-channel logging is the fix."""
    literal = replace(RULES[SnapshotMode.CYCLIC], log_until_all_back_edges=True)
    graph, inputs, cut = TWO_BACK_EDGES, TWO_BACK_EDGES_INPUTS, TWO_BACK_EDGES_CUT
    reference = final_states(graph, inputs)
    as_printed = Simulation(graph, inputs, cut, SnapshotMode.CYCLIC, TWO_BACK_EDGES_SEED, rules=literal).run()
    recovered = restore(graph, inputs, as_printed.snapshots[1]).final_states
    assert sum(recovered["head#0"].values()) > sum(reference["head#0"].values())
    for seed in [TWO_BACK_EDGES_SEED, *range(20)]:
        fixed = simulate(graph, inputs, cut, SnapshotMode.CYCLIC, seed)
        assert restore(graph, inputs, fixed.snapshots[1]).final_states == reference


def test_an_unaligned_barrier_overtakes_records_but_never_a_barrier() -> None:
    channel = MERGE.to_execution_graph().channels[0]
    queue = ChannelQueue(channel)
    for message in (Record(1, 1), Barrier(1), Record(2, 2), Record(3, 3)):
        queue.push(message)
    assert queue.overtake(Barrier(2)) == [Record(2, 2), Record(3, 3)]
    assert queue.contents() == (Record(1, 1), Barrier(1), Barrier(2), Record(2, 2), Record(3, 3))


def test_a_cut_that_goes_back_is_refused() -> None:
    with pytest.raises(SimulationInputError, match="cuts must not go back"):
        simulate(MERGE, MERGE_INPUTS, {1: {"src#0": 2, "src#1": 2}, 2: {"src#0": 1, "src#1": 2}})
