"""What each operator kind does to one record: small deterministic functions over a dict state.

Every function is a function of the record alone plus a commutative update of
the state (sums and counts). That choice is what makes the simulator an oracle:
the multiset of records crossing every channel, and so every final state, does
not depend on the interleaving, which lets tests compare runs with different
schedules, with and without a failure, against a reference computed without
barriers.
"""

from __future__ import annotations

from enum import StrEnum

from coordinator.dataflow.graph import OperatorKind
from coordinator.simulator.channels import Record

# Key space of the generated records; small so that keys collide across
# sources and hash partitions.
KEY_SPACE = 16
# Offset key of a source's state: the source's position in its input.
SOURCE_OFFSET = "offset"
# Counter key of a stateful_map's state.
SEEN = "seen"


class Route(StrEnum):
    """Which output channels an emitted record may take."""

    ANY = "any"  # every output edge
    LOOP = "loop"  # back-edges only: an iterate tail sending a record round again
    EXIT = "exit"  # regular edges only: an iterate tail letting a record leave the loop


Emission = tuple[Route, Record]


def loop_rounds(key: int) -> int:
    """How many times a record entering a loop goes round (1 or 2): bounded, so loops end."""
    return 1 + key % 2


def source_record(task_name: str, offset: int, item: int) -> Record:
    return Record(key=item % KEY_SPACE, value=item, origin=(task_name, offset))


def initial_state(kind: OperatorKind) -> dict:
    if kind is OperatorKind.SOURCE:
        return {SOURCE_OFFSET: 0}
    if kind is OperatorKind.PROCESS:
        return {SEEN: 0}
    return {}


def _bump(state: dict, key: int, by: int) -> None:
    state[key] = state.get(key, 0) + by


def apply(kind: OperatorKind, state: dict, record: Record, from_back_edge: bool) -> list[Emission]:
    """Update ``state`` in place with ``record`` and return what the task emits."""
    if kind is OperatorKind.SOURCE:
        state[SOURCE_OFFSET] = record.origin[1] + 1
        return [(Route.ANY, record)]
    if kind is OperatorKind.MAP:
        mapped = Record((3 * record.key + 1) % KEY_SPACE, record.value + 1, record.hops, record.origin)
        return [(Route.ANY, mapped)]
    if kind is OperatorKind.FLAT_MAP:
        # even keys fan out to two records so that output size differs from input size
        out = [(Route.ANY, record)]
        if record.key % 2 == 0:
            twin = Record((record.key + 1) % KEY_SPACE, record.value, record.hops, record.origin)
            out.append((Route.ANY, twin))
        return out
    if kind is OperatorKind.FILTER:
        return [] if record.key % 4 == 3 else [(Route.ANY, record)]
    if kind is OperatorKind.AGGREGATE:
        _bump(state, record.key, record.value)
        return [(Route.ANY, record)]
    if kind in (OperatorKind.WINDOW, OperatorKind.JOIN, OperatorKind.INTERVAL_JOIN):
        _bump(state, record.key, 1)
        return [(Route.ANY, record)]
    if kind is OperatorKind.PROCESS:
        state[SEEN] += 1
        return [(Route.ANY, record)]
    if kind is OperatorKind.ITERATE_HEAD:
        # counts every arrival, back-edge ones included, so a lost or
        # duplicated back-edge record shows in the head's state
        _bump(state, record.key, 1)
        if from_back_edge:
            return [(Route.ANY, record)]
        return [(Route.ANY, Record(record.key, record.value, loop_rounds(record.key), record.origin))]
    if kind is OperatorKind.ITERATE_TAIL:
        if record.hops > 0:
            return [(Route.LOOP, Record(record.key, record.value, record.hops - 1, record.origin))]
        return [(Route.EXIT, record)]
    if kind is OperatorKind.SINK:
        _bump(state, record.key, 1)
        return []
    raise ValueError(f"the simulator has no semantics for operator kind {kind}")
