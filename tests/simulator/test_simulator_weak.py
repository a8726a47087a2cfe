"""Weak-consistency snapshots (seed 003) in the simulator: weak consistency (loses records on failure;
not exactly-once), held to what it does promise, beside ABS under the same faults.

Without failures weak mode computes the exact result. Under seeded kills of
non-source tasks it never counts a word twice, and what it loses is exactly
the records the failed tasks lost (processed since their own snapshot, queued
for them, or sent to them while down); aligned checkpoints under the same kills
lose and duplicate nothing. A failed task snapshot declines an aligned
checkpoint but only that task's own weak snapshot. The references are computed
independently (a plain recount, a run with no barrier and no failure).
"""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from absreplay_examples.definitions import wordcount
from absreplay_examples.recount import tokenize
from coordinator.dataflow.graph import OperatorKind
from coordinator.simulator import (
    WORD_COUNT,
    Kill,
    Simulation,
    SimulationInputError,
    SnapshotFailures,
    SnapshotMode,
    TaskFailure,
    final_states,
    lost_and_duplicated,
    restore,
    run_with_kills,
    simulate,
)
from tests.simulator.test_simulator import Case, cases

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WC = wordcount(parallelism=2).graph
SOURCES = ("source#0", "source#1")
NON_SOURCES = ("tokenize#0", "tokenize#1", "count#0", "count#1", "sink#0", "sink#1")
WORDS = st.sampled_from(["a", "b", "c", "dd", "e"])


@st.composite
def word_count_runs(draw: st.DrawFn) -> tuple[dict[str, list[str]], dict[int, dict[str, int]], int, list[Kill]]:
    """Lines for both sources, 1-3 cuts, a scheduler seed and 1-3 kills of non-source tasks."""
    line = st.lists(WORDS, min_size=1, max_size=4).map(" ".join)
    inputs = {name: draw(st.lists(line, min_size=1, max_size=12)) for name in SOURCES}
    barriers = draw(st.integers(1, 3))
    positions = {name: sorted(draw(st.lists(st.integers(0, len(inputs[name])), min_size=barriers,
                                            max_size=barriers))) for name in SOURCES}
    cuts = {n: {name: positions[name][n - 1] for name in SOURCES} for n in range(1, barriers + 1)}
    kills = draw(st.lists(st.builds(Kill, st.integers(1, 150), st.sampled_from(NON_SOURCES), st.integers(0, 20)),
                          min_size=1, max_size=3))
    return inputs, cuts, draw(st.integers(0, 2**32 - 1)), kills


def truth(inputs: dict[str, list[str]]) -> Counter[str]:
    return Counter(w for lines in inputs.values() for line in lines for w in tokenize(line))


def counted(states: dict[str, dict]) -> Counter[str]:
    out: Counter[str] = Counter()
    for task, state in states.items():
        if task.startswith("count#"):
            out.update(state)
    return out


def words_lost(failures: tuple[TaskFailure, ...]) -> Counter[str]:
    """The words whose count the failures' lost records took away: a word record at a counter,
    every word of a line at a tokenizer; the sink's losses leave the counters alone."""
    out: Counter[str] = Counter()
    for failure in failures:
        for record in failure.lost:
            if failure.task.startswith("count#"):
                out[str(record.key)] += int(record.value)
            elif failure.task.startswith("tokenize#"):
                out.update(tokenize(str(record.value)))
    return out


@FAST
@given(cases())
def test_weak_without_failures_gives_the_exact_result_and_every_stateful_task_acks_every_cut(case: Case) -> None:
    result = simulate(case.graph, case.inputs, case.cuts, SnapshotMode.WEAK, case.seed)
    assert result.final_states == final_states(case.graph, case.inputs)
    assert result.terminated and not result.snapshots and result.weak is not None
    eg = case.graph.to_execution_graph()
    stateful = {t.name for t in eg.tasks if case.graph.operator(t.operator).is_stateful}
    sources = {t.name for t in eg.tasks if case.graph.operator(t.operator).kind is OperatorKind.SOURCE}
    assert result.weak.snapshotting == stateful - sources
    assert result.weak.acks == {n: stateful - sources for n in case.cuts}


@FAST
@given(word_count_runs())
def test_weak_under_kills_never_duplicates_and_loses_exactly_what_the_failed_tasks_lost(run) -> None:
    inputs, cuts, seed, kills = run
    result = run_with_kills(WC, inputs, cuts, SnapshotMode.WEAK, kills, seed, semantics=WORD_COUNT)
    assert_loses_exactly_what_the_failed_tasks_lost(inputs, result.failures, result.final_states)


def assert_loses_exactly_what_the_failed_tasks_lost(
    inputs: dict[str, list[str]], failures: tuple[TaskFailure, ...], states: dict[str, dict]
) -> int:
    got, expected = counted(states), truth(inputs)
    lost, duplicated = lost_and_duplicated(got, expected)
    assert duplicated == 0
    # per word: the shortfall is the records routed to the failed tasks since their own snapshot
    assert expected - got == words_lost(failures)
    assert lost == sum(words_lost(failures).values())
    for failure in failures:
        assert failure.restored <= failure.triggered
        if failure.task.startswith("tokenize#"):  # stateless: nothing to roll back
            assert failure.rolled_back == ()
    return lost


def test_a_counter_killed_twice_between_snapshots_loses_its_words_once() -> None:
    """Not vacuous: the second failure rolls back only what the task processed since the first restart."""
    # "e", "f" and "g" hash to count#0, "a" and "b" to count#1
    inputs = {"source#0": ["e f a"] * 10, "source#1": ["g b e"] * 10}
    cuts = {1: {"source#0": 2, "source#1": 2}}
    kills = [Kill(100, "count#0", 5), Kill(140, "count#0", 5), Kill(150, "count#1", 5)]
    result = run_with_kills(WC, inputs, cuts, SnapshotMode.WEAK, kills, seed=2, semantics=WORD_COUNT)
    assert [(f.task, f.restored) for f in result.failures] == [("count#0", 1), ("count#0", 1), ("count#1", 1)]
    assert all(f.rolled_back for f in result.failures)
    assert assert_loses_exactly_what_the_failed_tasks_lost(inputs, result.failures, result.final_states) > 0


@FAST
@given(word_count_runs(), st.sampled_from([1.0, 0.7]))
def test_aligned_under_the_same_kills_loses_and_duplicates_nothing(run, success: float) -> None:
    inputs, cuts, seed, kills = run
    fails = SnapshotFailures(success, seed)
    aligned = run_with_kills(WC, inputs, cuts, SnapshotMode.ALIGNED, kills, seed, semantics=WORD_COUNT,
                             snapshot_fails=fails)
    assert lost_and_duplicated(counted(aligned.final_states), truth(inputs)) == (0, 0)
    assert aligned.final_states == final_states(WC, inputs, semantics=WORD_COUNT)
    assert all(f.lost == () and f.restored <= f.triggered for f in aligned.failures)
    at_least_once = run_with_kills(WC, inputs, cuts, SnapshotMode.AT_LEAST_ONCE, kills, seed, semantics=WORD_COUNT,
                                   snapshot_fails=fails)
    assert lost_and_duplicated(counted(at_least_once.final_states), truth(inputs))[0] == 0


INPUTS = {s: ["a b c", "dd e"] * 3 for s in SOURCES}
CUTS = {n: dict.fromkeys(SOURCES, 2 * n) for n in (1, 2, 3)}


def test_with_p_1_every_checkpoint_completes_and_every_task_snapshot_succeeds() -> None:
    always = SnapshotFailures(1.0, seed=9)
    aligned = simulate(WC, INPUTS, CUTS, SnapshotMode.ALIGNED, 1, semantics=WORD_COUNT, snapshot_fails=always)
    assert set(aligned.snapshots) == {1, 2, 3} and not aligned.declined and aligned.terminated
    weak = simulate(WC, INPUTS, CUTS, SnapshotMode.WEAK, 1, semantics=WORD_COUNT, snapshot_fails=always).weak
    assert weak is not None and weak.acks == dict.fromkeys(CUTS, weak.snapshotting)


def test_one_failed_task_snapshot_declines_the_aligned_checkpoint_but_only_its_own_weak_snapshot() -> None:
    inputs, cuts = INPUTS, CUTS

    def count0_fails_at_2(checkpoint_id: int, task: str) -> bool:
        return (checkpoint_id, task) == (2, "count#0")

    aligned = simulate(WC, inputs, cuts, SnapshotMode.ALIGNED, 4, semantics=WORD_COUNT,
                       snapshot_fails=count0_fails_at_2)
    assert set(aligned.snapshots) == {1, 3}
    assert aligned.declined == {2: frozenset({"count#0"})} and not aligned.incomplete
    sim = Simulation(WC, inputs, cuts, SnapshotMode.WEAK, 4, semantics=WORD_COUNT, snapshot_fails=count0_fails_at_2)
    while sim.triggered < 2:
        assert sim.step()
    assert sim.weak is not None
    assert sim.weak.acks[2] == {"count#1", "sink#0", "sink#1"}
    assert {name: s.checkpoint_id for name, s in sim.weak.latest.items()} == {
        "count#0": 1, "count#1": 2, "sink#0": 2, "sink#1": 2}
    # a failure now restores count#0 from its own older snapshot, the others untouched
    before = {name: dict(t.state) for name, t in sim.tasks.items() if name != "count#0"}
    failure = sim.fail_task("count#0")
    assert (failure.restored, failure.triggered) == (1, 2)
    assert sim.tasks["count#0"].state == sim.weak.latest["count#0"].state
    assert {name: t.state for name, t in sim.tasks.items() if name != "count#0"} == before


def test_snapshot_failures_are_seeded_and_succeed_at_the_given_rate() -> None:
    draws = [(n, f"t#{i}") for n in range(400) for i in range(10)]
    for p in (0.0, 0.9, 1.0):
        fails = SnapshotFailures(p, seed=5)
        outcomes = [fails(n, t) for n, t in draws]
        assert outcomes == [SnapshotFailures(p, seed=5)(n, t) for n, t in draws]
        assert abs(outcomes.count(False) / len(draws) - p) < 0.03


def test_only_weak_restarts_a_single_task_and_never_a_source() -> None:
    inputs = {s: ["a"] for s in SOURCES}
    with pytest.raises(SimulationInputError, match="only weak mode"):
        Simulation(WC, inputs, mode=SnapshotMode.ALIGNED).fail_task("count#0")
    with pytest.raises(SimulationInputError, match="never rewinds a source"):
        Simulation(WC, inputs, mode=SnapshotMode.WEAK).fail_task("source#0")


@pytest.mark.parametrize("function", [simulate, restore, run_with_kills, Simulation])
def test_nothing_defaults_to_weak(function: Any) -> None:
    defaults = [p.default for p in inspect.signature(function).parameters.values()]
    assert SnapshotMode.WEAK not in defaults and "weak" not in defaults
