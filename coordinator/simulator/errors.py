"""Errors the simulator raises, inside the project's one exception hierarchy."""

from __future__ import annotations

from coordinator.errors import AbsError, UsageError


class SimulationInputError(UsageError):
    """The graph, inputs or cuts given to the simulator cannot be simulated as asked."""


class SimulationError(AbsError):
    """A simulation did not behave: it exceeded its step budget (a bug in an operator or rule)."""
