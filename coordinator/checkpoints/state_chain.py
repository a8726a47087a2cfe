"""Which stored files make up an operator's keyed state at a checkpoint (no Spark here).

A subtask's snapshot at checkpoint n is a full one, or a delta on a base
checkpoint (its ack's ``base_checkpoint_id``); following the bases from a head
checkpoint back to a full snapshot gives the files whose rows, newest
``updated`` per key, are the state. Restores (spark_jobs.run.runner), `absreplay
state` and `absreplay diff` read the same chain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from coordinator.checkpoints.store import CheckpointStore
from coordinator.errors import StateIntegrityError


class _Snapshot(Protocol):
    checkpoint_id: int
    base_checkpoint_id: int | None


A = TypeVar("A", bound=_Snapshot)


class MissingBase(Exception):
    """A delta's base checkpoint has no snapshot of the subtask: the chain does not end in a full one."""

    def __init__(self, base: int) -> None:
        super().__init__(base)
        self.base = base


def walk(snapshot_at: Callable[[int], A | None], head: int) -> Iterator[A]:
    """One subtask's snapshots (its acks) from checkpoint ``head`` back along their bases to its full snapshot,
    newest first; nothing when ``head`` has none. Raises MissingBase when a base has none: the one walk of a
    chain, for restores and for what garbage collection keeps."""
    ack = snapshot_at(head)
    while ack is not None:
        yield ack
        base = ack.base_checkpoint_id
        if base is None:
            return
        ack = snapshot_at(base)
        if ack is None:
            raise MissingBase(base)


@dataclass(frozen=True)
class ChainLink:
    """One stored file set of a restore chain: a subtask's snapshot at one checkpoint."""

    checkpoint_id: int
    subtask: int
    uri: str
    rows: int
    checksum: str | None
    #: a full snapshot (the end of a chain), not a delta on a base
    full: bool = True


def chain(store: CheckpointStore, job: str, operator: str, heads: dict[int, int]) -> tuple[list[ChainLink], int]:
    """The snapshot files of ``operator``, from each subtask's head checkpoint back to its full
    snapshot, and the longest chain's length. ``heads``: subtask -> checkpoint.

    Links are ordered newest first per subtask; the last link of a subtask is its full snapshot.
    A delta whose base has no ack of that subtask is refused (StateIntegrityError): loading it
    alone would silently drop every key the delta did not touch."""
    links, length = [], 0
    acks_of: dict[int, dict[int, object]] = {}

    def ack_at(checkpoint_id: int, subtask: int):
        if checkpoint_id not in acks_of:
            acks_of[checkpoint_id] = {a.subtask: a for a in store.acks(job, checkpoint_id) if a.operator == operator}
        return acks_of[checkpoint_id].get(subtask)

    for subtask, head in sorted(heads.items()):
        n = 0
        try:
            for ack in walk(lambda checkpoint_id, subtask=subtask: ack_at(checkpoint_id, subtask), head):
                n += 1
                if ack.state_uri:
                    links.append(ChainLink(ack.checkpoint_id, subtask, ack.state_uri, ack.state_rows, ack.checksum,
                                           full=ack.base_checkpoint_id is None))
        except MissingBase as missing:
            raise StateIntegrityError(
                f"the state of {operator} subtask {subtask} at checkpoint {head} is a delta on checkpoint "
                f"{missing.base}, which has no ack of that subtask: its incremental chain does not end in a "
                f"full snapshot; recover from an older checkpoint (absreplay recover {job} "
                f"--checkpoint N) or rewind"
            ) from None
        length = max(length, n)
    return links, length


def acked_subtasks(store: CheckpointStore, job: str, operator: str, checkpoint_id: int) -> dict[int, int]:
    """Every subtask of ``operator`` that acked the checkpoint, as heads (subtask -> checkpoint)."""
    return {a.subtask: checkpoint_id for a in store.acks(job, checkpoint_id) if a.operator == operator}
