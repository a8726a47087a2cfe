"""Pluggable operator semantics: what tasks do with records, so the oracle can run a real job's logic.

The snapshot algorithms never look inside a record; only the operators do. A
``Semantics`` bundles everything record-specific: how a source item becomes
a record, a task's initial state, what an operator does with a record, and
which subtask a hash edge routes a record to. ``GENERIC`` is the synthetic
semantics of ``operators`` (sums and counts over small integer keys) that the
hypothesis tests use; ``coordinator.simulator.jobs`` has the reference jobs'
semantics (word count, label propagation), to compare the Spark runtime's
stored state with the simulator's for the same input and barrier cut.

A semantics whose final states do not depend on the interleaving keeps the
simulator an oracle (see ``operators``); sources must keep their position in
their state under ``SOURCE_OFFSET``, which the global snapshot reads.
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol

import coordinator.simulator.operators as operators
from coordinator.dataflow.graph import OperatorKind
from coordinator.simulator.channels import Record
from coordinator.simulator.operators import Emission


def hash_partition(record: Record, parallelism: int) -> int:
    """Integer keys modulo the parallelism (as the synthetic tests assume); strings by CRC-32."""
    key = record.key
    if isinstance(key, str):
        return zlib.crc32(key.encode("utf-8")) % parallelism
    return key % parallelism


class Semantics(Protocol):
    def source_record(self, task_name: str, offset: int, item: Any) -> Record: ...

    def initial_state(self, kind: OperatorKind) -> dict: ...

    def apply(self, kind: OperatorKind, state: dict, record: Record, from_back_edge: bool) -> list[Emission]:
        """Update ``state`` in place with ``record`` and return what the task emits."""
        ...

    def partition(self, record: Record, parallelism: int) -> int: ...


class Generic:
    """The synthetic semantics of ``coordinator.simulator.operators``."""

    def source_record(self, task_name: str, offset: int, item: Any) -> Record:
        return operators.source_record(task_name, offset, item)

    def initial_state(self, kind: OperatorKind) -> dict:
        return operators.initial_state(kind)

    def apply(self, kind: OperatorKind, state: dict, record: Record, from_back_edge: bool) -> list[Emission]:
        return operators.apply(kind, state, record, from_back_edge)

    def partition(self, record: Record, parallelism: int) -> int:
        return hash_partition(record, parallelism)


GENERIC = Generic()
