"""The Spark runtime against the paper-faithful simulator: same input, same barrier cuts.

Segments land in batches with a barrier after each; the Spark runtime processes
the epochs (one catch-up run) and its *stored* checkpoints are read back from
Parquet (state and back-edge log, every checksum checked). The simulator runs
the same job graph over the same records, the partitions of a source subtask
concatenated epoch by epoch so that its barrier positions are the same cuts.

wordcount (acyclic): the stored counts at checkpoint n equal the simulator's
aligned snapshot n (Algorithm 1 and Algorithm 2 alike), word for word.

connected_components (cyclic): the two runtimes schedule the loop differently
(Spark in synchronous rounds, at most ``loop_rounds`` per epoch; the simulator
one message at a time, with Algorithm 2's back-edge logging), so the labels in
a snapshot of a running loop legitimately differ, and so do the logs. What
must agree, for every checkpoint n:

- the loop head's adjacency: exactly the edges before cut n, in both;
- soundness: every stored label is a vertex of the same component, never above
  the vertex itself (a label only ever decreases towards the component's min);
- the meaning of the checkpoint: state n with back-edge log n fed back, run
  until nothing circulates, gives the same labels in Spark and in the
  simulator (its snapshot restored over the prefix), and both equal a
  union-find over the prefix;
- with enough rounds for the loop to drain inside each epoch, Spark's stored
  state n equals the simulator's stop-the-world snapshot n exactly (labels and
  neighbours) and its back-edge logs are empty;
- with few rounds, some back-edge log is not empty and is needed: the state
  without it converges to wrong labels (the Spark twin of the simulator's
  "dropping the back-edge log loses records").
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from absreplay_examples.recount import complete_segments
from absreplay_examples.sample_data import land_segment
from absreplay_examples.union_find import components
from coordinator.sources import source
from absreplay_examples.definitions import connected_components
from coordinator.simulator import LABEL_PROPAGATION, WORD_COUNT, SnapshotMode, prefix_inputs, restore, simulate
from tests.helpers import make_workspace

pytestmark = pytest.mark.spark


def simulator_inputs(ws, item) -> tuple[dict[str, list], dict[int, dict[str, int]]]:
    """Per source subtask, its partitions' records epoch by epoch; cut n = its position after epoch n."""
    p = ws.job.graph.operator("source").parallelism
    lines: dict[str, list[bytes]] = {}
    for part in source.list_partitions(ws.input_dir):
        lines[part] = [line for seg in complete_segments(ws.input_dir / part) for line in source.split_records(
            seg.read_bytes())]
    inputs: dict[str, list] = {f"source#{i}": [] for i in range(p)}
    cuts, previous = {}, {}
    for ck in ws.store.checkpoints(ws.job.name):
        cut = ws.store.cut(ws.job.name, ck.checkpoint_id)
        for part in sorted(cut):
            task = f"source#{source.source_subtask(part, p)}"
            inputs[task] += [item(line) for line in lines[part][previous.get(part, 0):cut[part]]]
        cuts[ck.checkpoint_id] = {task: len(records) for task, records in inputs.items()}
        previous = cut
    return inputs, cuts


def land_edges(ws, batch: int, edges: list[tuple[int, int]]) -> None:
    half = len(edges) // 2
    for i, chunk in enumerate((edges[:half], edges[half:])):
        land_segment(ws.input_dir / f"p{i}", f"seg-{batch:06d}.txt", [f"{a} {b}" for a, b in chunk])


def edge_batches() -> list[list[tuple[int, int]]]:
    """Long paths whose smallest id sits at one end (labels need many rounds), random edges, a merge."""
    rng = random.Random(11)
    path = [(v, v - 1) for v in range(14, 1, -1)]
    rng.shuffle(path)
    second = [(rng.randrange(40, 60), rng.randrange(40, 60)) for _ in range(16)] + [(v, v + 1) for v in range(60, 70)]
    rng.shuffle(second)
    third = [(70, 15), (15, 14), (5, 5), (100, 101), (101, 100)]
    return [path, second, third]


def spark_checkpoint(runner, n: int, quiesce: bool = True, drop_log: bool = False):
    """Checkpoint n as stored: (vertex -> (label, neighbours), back-edge log records, labels after
    feeding the log back and running the loop until nothing circulates (without the log: ``drop_log``))."""
    from spark_jobs.run import back_edge_log

    restored = runner.restore(n)
    state = {r.vertex: (r.component, frozenset(r.neighbors)) for r in restored.state.collect()}
    log = [(r.vertex, r.label) for r in restored.back_edge.collect()]
    if not quiesce:
        return state, log, None
    fed = back_edge_log.empty(runner.spark, runner.flow) if drop_log else restored.back_edge
    quiesced = runner.flow.quiesce(runner.spark, restored.state, fed, n)
    return state, log, {r.vertex: r.component for r in quiesced.collect()}


def run_cc(tmp_path: Path, url: str, spark, rounds: int):
    from spark_jobs.run.runner import EpochRunner

    ws = make_workspace(tmp_path, url, connected_components(loop_rounds=rounds))
    batches = edge_batches()
    for b, edges in enumerate(batches):
        land_edges(ws, b, edges)
        ws.coordinator.inject()
    assert not ws.run_epochs(spark).failed
    runner = EpochRunner(spark, ws.store, ws.job, ws.settings.data_dir, ws.settings.state_uri)
    inputs, cuts = simulator_inputs(ws, lambda line: tuple(int(x) for x in line.split()))
    return ws, runner, inputs, cuts


def head(states: dict[str, dict]) -> dict[int, tuple[int, frozenset[int]]]:
    return {v: s for task, st in states.items() if task.startswith("labels#") for v, s in st.items()}


def test_connected_components_checkpoints_mean_what_the_simulators_mean(tmp_path, sqlite_url, spark) -> None:
    ws, runner, inputs, cuts = run_cc(tmp_path, sqlite_url, spark, rounds=2)
    cyclic = simulate(ws.job.graph, inputs, cuts, SnapshotMode.CYCLIC, seed=5, semantics=LABEL_PROPAGATION)
    assert cyclic.terminated and set(cyclic.snapshots) == {1, 2, 3}
    for n, cut in cuts.items():
        prefix = [e for task in sorted(inputs) for e in inputs[task][: cut[task]]]
        truth = components(prefix)
        state, log, quiesced = spark_checkpoint(runner, n)
        simulated = head(cyclic.snapshots[n].task_states)
        assert {v: nbrs for v, (_, nbrs) in state.items()} == {v: nbrs for v, (_, nbrs) in simulated.items()}
        for labels in ({v: lab for v, (lab, _) in state.items()}, {v: lab for v, (lab, _) in simulated.items()}):
            assert set(labels) == set(truth)
            assert all(truth[label] == truth[v] and label <= v for v, label in labels.items())
        sim_quiesced = restore(ws.job.graph, prefix_inputs(inputs, cut), cyclic.snapshots[n], 9,
                               semantics=LABEL_PROPAGATION)
        assert quiesced == {v: lab for v, (lab, _) in head(sim_quiesced.final_states).items()} == truth
        # six rounds in three epochs cannot carry label 1 along the 13-edge path: the log holds it
        assert log
    # and it matters: without it the state converges to wrong labels
    _, _, without_log = spark_checkpoint(runner, 3, drop_log=True)
    assert without_log != components([e for task in sorted(inputs) for e in inputs[task]])


def test_connected_components_state_equals_the_stop_the_world_snapshot_when_the_loop_drains(
        tmp_path, sqlite_url, spark) -> None:
    ws, runner, inputs, cuts = run_cc(tmp_path, sqlite_url, spark, rounds=64)
    sync = simulate(ws.job.graph, inputs, cuts, SnapshotMode.SYNC, seed=3, semantics=LABEL_PROPAGATION)
    for n in cuts:
        state, log, _ = spark_checkpoint(runner, n, quiesce=False)
        assert log == []
        assert state == head(sync.snapshots[n].task_states)


def test_wordcount_stored_counts_equal_the_aligned_snapshots(tmp_path, sqlite_url, spark) -> None:
    from spark_jobs.run.runner import EpochRunner

    ws = make_workspace(tmp_path, sqlite_url)
    for b in range(3):
        ws.land(b, lines=40, vocab=60)
        ws.coordinator.inject()
    assert not ws.run_epochs(spark).failed
    runner = EpochRunner(spark, ws.store, ws.job, ws.settings.data_dir, ws.settings.state_uri)
    inputs, cuts = simulator_inputs(ws, lambda line: line.decode("utf-8"))
    for mode in (SnapshotMode.ALIGNED, SnapshotMode.CYCLIC):
        result = simulate(ws.job.graph, inputs, cuts, mode, seed=1, semantics=WORD_COUNT)
        for n in cuts:
            stored = {r["word"]: r["count"] for r in runner.restore(n).state.collect()}
            simulated: Counter[str] = Counter()
            for task, st in result.snapshots[n].task_states.items():
                if task.startswith("count#"):
                    simulated.update(st)
            assert stored == dict(simulated) == ws.expected_at(n), (mode, n)
