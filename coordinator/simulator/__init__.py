"""A literal, event-driven simulator of the paper's task-level snapshot algorithms: the test oracle.

Pure Python, no Spark, no Airflow, no I/O. It runs an execution graph
(``coordinator.dataflow.graph``) over finite source inputs with FIFO channels and a
seeded scheduler, takes checkpoints with Algorithm 1 (``aligned``), Algorithm 2
(``cyclic``, with back-edge logs) or the variants the paper is compared with
(``unaligned``, ``at_least_once``, ``sync``), restores from a global snapshot,
and computes reference states without barriers. ``weak`` (seed 003) is weak
consistency (loses records on failure; not exactly-once), opt-in: per-task
snapshots without barriers and single-task restarts; ``failures`` injects
seeded task kills and snapshot failures and recovers as each mode does.

Typical use::

    result = simulate(graph, {"src#0": [1, 2, 3]}, cuts={1: {"src#0": 2}}, mode=SnapshotMode.CYCLIC, seed=7)
    result.snapshots[1].state("count#0")           # a task's state at barrier 1
    restore(graph, inputs, result.snapshots[1]).final_states

``semantics`` plugs in what operators do: ``GENERIC`` (synthetic sums and
counts, the default) or a reference job's (``WORD_COUNT``, ``LABEL_PROPAGATION``
for connected_components), to compare the Spark runtime with the oracle.
"""

from coordinator.simulator.algorithms import RULES, LogScope, Rules, SnapshotMode, Trigger
from coordinator.simulator.channels import Barrier, Record
from coordinator.simulator.errors import SimulationError, SimulationInputError
from coordinator.simulator.failures import (
    Kill,
    KilledRun,
    SnapshotFailures,
    kill_schedule,
    lost_and_duplicated,
    run_with_kills,
)
from coordinator.simulator.jobs import LABEL_PROPAGATION, WORD_COUNT
from coordinator.simulator.operators import KEY_SPACE, loop_rounds
from coordinator.simulator.reference import final_states, prefix_inputs, prefix_states
from coordinator.simulator.run import Simulation, SimulationResult, restore, simulate
from coordinator.simulator.semantics import GENERIC, Semantics
from coordinator.simulator.snapshot import GlobalSnapshot, TaskSnapshot
from coordinator.simulator.sources import Cut
from coordinator.simulator.weak import TaskFailure, WeakOutcome

__all__ = [
    "GENERIC",
    "KEY_SPACE",
    "LABEL_PROPAGATION",
    "RULES",
    "Semantics",
    "Barrier",
    "Cut",
    "GlobalSnapshot",
    "Kill",
    "KilledRun",
    "LogScope",
    "Record",
    "Rules",
    "Simulation",
    "SimulationError",
    "SimulationInputError",
    "SimulationResult",
    "SnapshotFailures",
    "SnapshotMode",
    "TaskFailure",
    "TaskSnapshot",
    "Trigger",
    "WORD_COUNT",
    "WeakOutcome",
    "final_states",
    "kill_schedule",
    "lost_and_duplicated",
    "loop_rounds",
    "prefix_inputs",
    "prefix_states",
    "restore",
    "run_with_kills",
    "simulate",
]
