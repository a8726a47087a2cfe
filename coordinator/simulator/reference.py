"""Reference states computed without any barrier: the oracle the snapshots are checked against.

``prefix_states`` feeds every source task exactly its records before the cut
and runs to the end; by the paper's feasibility property an aligned snapshot of
an acyclic graph must equal it. ``final_states`` is the failure-free result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coordinator.dataflow.graph import ExecutionGraph, JobGraph
from coordinator.simulator.run import Simulation
from coordinator.simulator.semantics import GENERIC, Semantics
from coordinator.simulator.sources import Cut


def prefix_inputs(inputs: Mapping[str, Sequence[Any]], cut: Cut) -> dict[str, tuple[Any, ...]]:
    """Each source task's records before its barrier position."""
    return {name: tuple(inputs.get(name, ()))[:position] for name, position in cut.items()}


def prefix_states(
    graph: JobGraph | ExecutionGraph, inputs: Mapping[str, Sequence[Any]], cut: Cut, seed: int = 0,
    *, semantics: Semantics = GENERIC,
) -> dict[str, dict]:
    """Every task's state after processing exactly the pre-barrier prefix, with no barriers, to completion."""
    return Simulation(graph, prefix_inputs(inputs, cut), seed=seed, semantics=semantics).run().final_states


def final_states(
    graph: JobGraph | ExecutionGraph, inputs: Mapping[str, Sequence[Any]], seed: int = 0,
    *, semantics: Semantics = GENERIC,
) -> dict[str, dict]:
    """Every task's state after processing all input with no barrier and no failure."""
    return Simulation(graph, inputs, seed=seed, semantics=semantics).run().final_states
