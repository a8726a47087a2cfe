"""Source tasks' inputs: finite, replayable lists with barriers placed at the cut.

Barrier n sits before the record at offset ``cut_n[source]``: epoch n is the
records with cut_{n-1} <= offset < cut_n, as a job's epochs are (``coordinator.sources``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordinator.simulator.channels import Barrier, Record
from coordinator.simulator.errors import SimulationInputError
from coordinator.simulator.operators import source_record

Cut = Mapping[str, int]


class SourceCursor:
    """One source task's position in its input and the barriers still to inject."""

    def __init__(
        self, task_name: str, items: Sequence[Any], start: int, barriers: list[tuple[int, int]],
        make_record: Callable[[str, int, Any], Record] = source_record,
    ) -> None:
        self.task_name = task_name
        self.make_record = make_record
        self.items = tuple(items)
        self.offset = start
        # (position, checkpoint id), in injection order
        self.barriers = barriers

    @property
    def at_barrier(self) -> bool:
        return bool(self.barriers) and self.barriers[0][0] == self.offset

    @property
    def done(self) -> bool:
        return not self.barriers and self.offset >= len(self.items)

    def next_event(self) -> Record | Barrier | None:
        if self.barriers and self.barriers[0][0] == self.offset:
            return Barrier(self.barriers[0][1])
        if self.offset < len(self.items):
            return self.make_record(self.task_name, self.offset, self.items[self.offset])
        return None

    def advance(self) -> None:
        if self.barriers and self.barriers[0][0] == self.offset:
            self.barriers.pop(0)
        else:
            self.offset += 1


def barrier_schedule(
    source_tasks: Sequence[str],
    inputs: Mapping[str, Sequence[int]],
    cuts: Mapping[int, Cut],
    starts: Mapping[str, int],
) -> dict[str, list[tuple[int, int]]]:
    """Per source task, the (position, checkpoint id) of every barrier; checks the cuts are monotone."""
    unknown = set(inputs) - set(source_tasks)
    if unknown:
        raise SimulationInputError(f"inputs for tasks that are not sources: {sorted(unknown)}")
    schedule: dict[str, list[tuple[int, int]]] = {name: [] for name in source_tasks}
    previous: dict[str, int] = dict(starts)
    for n in sorted(cuts):
        cut = cuts[n]
        if set(cut) != set(source_tasks):
            raise SimulationInputError(
                f"cut of barrier {n} must give a position for every source task "
                f"{sorted(source_tasks)}, got {sorted(cut)}"
            )
        for name in source_tasks:
            position = cut[name]
            if not previous[name] <= position <= len(inputs.get(name, ())):
                raise SimulationInputError(
                    f"barrier {n} at {name}: position {position} is outside "
                    f"[{previous[name]}, {len(inputs.get(name, ()))}] (cuts must not go back)"
                )
            schedule[name].append((position, n))
            previous[name] = position
    return schedule
