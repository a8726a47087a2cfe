"""Injected failures and the run that recovers from them the way each mode does.

Two kinds of fault, both seeded so that every mode meets the same ones: a
``Kill`` (a non-source task dies at a scheduler step, counted across restarts)
and a failed task snapshot (``SnapshotFailures``: the same (checkpoint, task)
pairs fail in every mode). ``run_with_kills`` recovers as the mode prescribes:

- every mode but ``weak``: the job stops, every task restores the latest
  completed global checkpoint and the sources rewind to its cut (``restore``);
  the later cuts are taken again under new checkpoint ids, as Flink never
  reuses an id (so a retaken cut gets its own snapshot-failure draw). Nothing is
  lost; at-least-once may count records twice.
- ``weak`` (weak consistency: loses records on failure; not exactly-once):
  only the dead task restarts, from its own latest snapshot, while the rest
  run on (``Simulation.fail_task``).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.dataflow.graph import ExecutionGraph, JobGraph, OperatorKind
from coordinator.simulator.algorithms import SnapshotMode
from coordinator.simulator.run import Simulation
from coordinator.simulator.semantics import GENERIC, Semantics
from coordinator.simulator.snapshot import GlobalSnapshot, SnapshotFails, no_snapshot_fails
from coordinator.simulator.sources import Cut
from coordinator.simulator.weak import TaskFailure, WeakOutcome


@dataclass(frozen=True)
class Kill:
    """Task ``task`` dies once the run has taken ``step`` scheduler steps and is down for ``downtime`` more."""

    step: int
    task: str
    downtime: int = 0


def kill_schedule(
    graph: JobGraph | ExecutionGraph, kills: int, horizon: int, seed: int, downtime: int = 0
) -> tuple[Kill, ...]:
    """``kills`` kills of random non-source tasks at distinct random steps in [1, horizon)."""
    eg = graph if isinstance(graph, ExecutionGraph) else graph.to_execution_graph()
    targets = [t.name for t in eg.tasks if eg.job_graph.operator(t.operator).kind is not OperatorKind.SOURCE]
    rng = random.Random(seed)
    steps = sorted(rng.sample(range(1, max(horizon, kills + 1)), kills))
    return tuple(Kill(step, rng.choice(targets), downtime) for step in steps)


class SnapshotFailures:
    """Each (checkpoint, task) snapshot fails with probability ``1 - success``, decided by ``seed`` alone."""

    def __init__(self, success: float, seed: int) -> None:
        self.success = success
        self.seed = seed

    def __call__(self, checkpoint_id: int, task: str) -> bool:
        return random.Random(f"{self.seed}/{checkpoint_id}/{task}").random() >= self.success


@dataclass(frozen=True)
class KilledRun:
    """A run to the end through its kills: final states, one ``TaskFailure`` per kill that happened."""

    final_states: dict[str, dict]
    failures: tuple[TaskFailure, ...]
    # the cuts (keys of the run's cuts) of the global checkpoints completed; empty in weak mode
    completed: frozenset[int]
    # weak mode: the tasks' own snapshots
    weak: WeakOutcome | None
    steps: int


def run_with_kills(
    graph: JobGraph | ExecutionGraph,
    inputs: Mapping[str, Sequence[Any]],
    cuts: Mapping[int, Cut],
    mode: SnapshotMode,
    kills: Sequence[Kill],
    seed: int = 0,
    *,
    semantics: Semantics = GENERIC,
    snapshot_fails: SnapshotFails = no_snapshot_fails,
    channel_capacity: int | None = None,
) -> KilledRun:
    """Run to the end, recovering from each kill as ``mode`` does; kills after the end do not happen."""
    pending = sorted(kills, key=lambda k: k.step)
    options: dict[str, Any] = {"semantics": semantics, "snapshot_fails": snapshot_fails,
                               "channel_capacity": channel_capacity}
    if SnapshotMode(mode) is SnapshotMode.WEAK:
        sim = Simulation(graph, inputs, cuts, mode, seed, **options)
        while True:
            while pending and sim.steps >= pending[0].step:
                kill = pending.pop(0)
                sim.fail_task(kill.task, kill.downtime)
            if not sim.step():
                break
        result = sim.run()  # nothing left to do: collects the result
        assert result.weak is not None
        return KilledRun(result.final_states, result.weak.failures, frozenset(), result.weak, sim.steps)

    failures: list[TaskFailure] = []
    latest: GlobalSnapshot | None = None
    clock = 0  # steps of every segment, plus the downtimes
    cut_of = {n: n for n in cuts}  # checkpoint id -> the cut (a key of ``cuts``) it is taken at
    sim = Simulation(graph, inputs, cuts, mode, seed, **options)
    completed: set[int] = set()  # cuts
    triggered = 0  # the latest cut every source passed, in any segment
    while True:
        if pending and clock >= pending[0].step:
            kill = pending.pop(0)
            completed |= {cut_of[n] for n in sim.snapshots}
            triggered = max(triggered, cut_of.get(sim.triggered, 0))
            if sim.snapshots:
                latest = sim.snapshots[max(sim.snapshots)]
            restored = cut_of[latest.checkpoint_id] if latest else 0
            failures.append(TaskFailure(kill.task, clock, restored, triggered))
            clock += kill.downtime
            later = {}
            for n in sorted(c for c in cuts if c > restored):
                new_id = max(cut_of) + 1
                cut_of[new_id], later[new_id] = n, cuts[n]
            sim = Simulation(graph, inputs, later, mode, seed + len(failures), restore_from=latest, **options)
            continue
        if not sim.step():
            break
        clock += 1
    result = sim.run()
    completed |= {cut_of[n] for n in result.snapshots}
    return KilledRun(result.final_states, tuple(failures), frozenset(completed), None, clock)


def lost_and_duplicated(got: Mapping[Any, int], truth: Mapping[Any, int]) -> tuple[int, int]:
    """Per key, what ``got`` lacks of ``truth`` (lost) and holds beyond it (duplicated), summed."""
    missing, excess = Counter(truth), Counter(got)
    missing.subtract(got)
    excess.subtract(truth)
    return sum(v for v in missing.values() if v > 0), sum(v for v in excess.values() if v > 0)
