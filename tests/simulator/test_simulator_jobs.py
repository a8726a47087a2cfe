"""The simulator running the reference jobs' semantics on their real job graphs.

Label propagation on connected_components' cyclic graph (random edge lists,
cuts and interleavings) against a union-find computed independently; word
count on wordcount's graph against a plain recount. These are the oracle's own
guarantees that tests/simulator/test_cc_vs_simulator.py then holds the Spark runtime to.
"""

from __future__ import annotations

from collections import Counter
from random import Random

from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from absreplay_examples.recount import tokenize
from absreplay_examples.union_find import components
from absreplay_examples.definitions import connected_components, wordcount
from coordinator.simulator import (
    LABEL_PROPAGATION,
    WORD_COUNT,
    SnapshotMode,
    prefix_inputs,
    restore,
    simulate,
)

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEARCH = settings(max_examples=300, database=None, phases=[Phase.generate])
CC = connected_components(parallelism=2).graph
WC = wordcount(parallelism=2).graph
SOURCES = ("source#0", "source#1")


def head_labels(states: dict[str, dict]) -> dict[int, int]:
    return {v: label for task, s in states.items() if task.startswith("labels#") for v, (label, _) in s.items()}


def head_adjacency(states: dict[str, dict]) -> dict[int, frozenset[int]]:
    return {v: nbrs for task, s in states.items() if task.startswith("labels#") for v, (_, nbrs) in s.items()}


def adjacency(edges: list[tuple[int, int]]) -> dict[int, frozenset[int]]:
    out: dict[int, set[int]] = {}
    for a, b in edges:
        out.setdefault(a, set())
        out.setdefault(b, set())
        if a != b:
            out[a].add(b)
            out[b].add(a)
    return {v: frozenset(n) for v, n in out.items()}


@st.composite
def edge_cases(draw: st.DrawFn, barriers: int = 2):
    vertex = st.integers(0, 24)
    inputs = {name: draw(st.lists(st.tuples(vertex, vertex), max_size=14)) for name in SOURCES}
    positions = {name: sorted(draw(st.lists(st.integers(0, len(inputs[name])), min_size=barriers,
                                            max_size=barriers))) for name in SOURCES}
    cuts = {n: {name: positions[name][n - 1] for name in SOURCES} for n in range(1, barriers + 1)}
    return inputs, cuts, draw(st.integers(0, 2**32 - 1))


def prefix_edges(inputs, cut) -> list[tuple[int, int]]:
    return [e for name in SOURCES for e in inputs[name][: cut[name]]]


@FAST
@given(edge_cases(), st.sampled_from([SnapshotMode.CYCLIC, SnapshotMode.UNALIGNED, SnapshotMode.SYNC]))
def test_label_propagation_snapshot_with_its_log_means_exactly_the_prefix_components(case, mode) -> None:
    inputs, cuts, seed = case
    result = simulate(CC, inputs, cuts, mode, seed, semantics=LABEL_PROPAGATION)
    assert result.terminated
    everything = [e for name in SOURCES for e in inputs[name]]
    assert head_labels(result.final_states) == components(everything)
    for n, cut in cuts.items():
        snapshot, edges = result.snapshots[n], prefix_edges(inputs, cut)
        truth = components(edges)
        if mode is not SnapshotMode.UNALIGNED:  # (an unaligned copy lacks the pre-barrier records in flight)
            # an aligned head's state holds exactly the prefix's adjacency ...
            assert head_adjacency(snapshot.task_states) == adjacency(edges)
            # ... and sound labels that need not be final: a vertex of the same component, never above itself
            for v, label in head_labels(snapshot.task_states).items():
                assert truth[label] == truth[v] and label <= v
        # fed back its logged records, with no new input, it converges to the prefix's components
        quiesced = restore(CC, prefix_inputs(inputs, cut), snapshot, seed + 1, semantics=LABEL_PROPAGATION)
        assert head_labels(quiesced.final_states) == truth
        if mode is SnapshotMode.SYNC:
            # stop-the-world: the loop drained before the copy
            assert head_labels(snapshot.task_states) == truth and not snapshot.back_edge_logs


@FAST
@given(edge_cases())
def test_label_propagation_restore_after_a_failure_gives_the_failure_free_result(case) -> None:
    inputs, cuts, seed = case
    result = simulate(CC, inputs, cuts, SnapshotMode.CYCLIC, seed, semantics=LABEL_PROPAGATION)
    everything = components([e for name in SOURCES for e in inputs[name]])
    for n in cuts:
        later = {m: c for m, c in cuts.items() if m > n}
        recovered = restore(CC, inputs, result.snapshots[n], seed ^ 0x5EED, cuts=later, semantics=LABEL_PROPAGATION)
        assert recovered.terminated and head_labels(recovered.final_states) == everything


def test_label_propagation_needs_its_back_edge_log() -> None:
    """Some cut leaves a lower label on the back-edge: restoring without the log gets components wrong."""

    def log_matters(case) -> bool:
        inputs, cuts, seed = case
        snapshot = simulate(CC, inputs, cuts, SnapshotMode.CYCLIC, seed, semantics=LABEL_PROPAGATION).snapshots[1]
        dropped = restore(CC, prefix_inputs(inputs, cuts[1]), snapshot, seed, drop_back_edge_logs=True,
                          semantics=LABEL_PROPAGATION)
        return head_labels(dropped.final_states) != components(prefix_edges(inputs, cuts[1]))

    inputs, cuts, seed = find(edge_cases(barriers=1), log_matters, settings=SEARCH, random=Random(0))
    snapshot = simulate(CC, inputs, cuts, SnapshotMode.CYCLIC, seed, semantics=LABEL_PROPAGATION).snapshots[1]
    assert snapshot.back_edge_log_size > 0
    kept = restore(CC, prefix_inputs(inputs, cuts[1]), snapshot, seed, semantics=LABEL_PROPAGATION)
    assert head_labels(kept.final_states) == components(prefix_edges(inputs, cuts[1]))


@FAST
@given(
    st.lists(st.text(alphabet="ab c,Éé_1", max_size=12), max_size=10),
    st.lists(st.text(alphabet="ab c,Éé_1", max_size=12), max_size=10),
    st.data(),
    st.sampled_from([SnapshotMode.ALIGNED, SnapshotMode.CYCLIC, SnapshotMode.SYNC]),
)
def test_word_count_snapshot_is_the_recount_of_the_prefix(lines0, lines1, data, mode) -> None:
    inputs = {"source#0": lines0, "source#1": lines1}
    cut = {name: data.draw(st.integers(0, len(inputs[name]))) for name in SOURCES}
    result = simulate(WC, inputs, {1: cut}, mode, data.draw(st.integers(0, 999)), semantics=WORD_COUNT)
    counts: Counter[str] = Counter()
    for task, s in result.snapshots[1].task_states.items():
        if task.startswith("count#"):
            counts.update(s)
    expected = Counter(w for name in SOURCES for line in inputs[name][: cut[name]] for w in tokenize(line))
    assert counts == expected
