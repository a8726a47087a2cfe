"""Epochs of a job's checkpoints, from the catalog: the epoch each checkpoint is (a replay re-does its
original's, and after a recovery ids no longer follow the epochs' order), the checkpoints whose epochs come
after one (what a rewind takes out of an append sink), and the records each checkpoint's commit carries
(the view, ``absreplay report`` and the dead-letter share read them through ``coordinator.catalog.audit``),
and the lineage of epochs that produced a checkpoint's state (a state TTL counts along it, verify replays it)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from sqlalchemy import select

from coordinator.catalog.models import Checkpoint, SourceCut
from coordinator.checkpoints.lifecycle import CheckpointStatus
from coordinator.errors import UsageError

if TYPE_CHECKING:
    from coordinator.checkpoints.store import CheckpointStore


def original_checkpoint(replay_of: dict[int, int | None], checkpoint_id: int) -> int:
    """The original checkpoint whose epoch ``checkpoint_id`` is: itself, or what its chain of replays re-does."""
    original, seen = checkpoint_id, set()
    while replay_of.get(original) is not None and original not in seen:
        seen.add(original)
        original = replay_of[original]  # type: ignore[assignment]
    return original


def epochs(c, job: str) -> dict[int, int]:
    """Each checkpoint of ``job`` -> the original checkpoint whose epoch it is (``original_checkpoint``): the
    epochs' order, which ids no longer follow after a recovery (its replays get ids above every epoch's)."""
    replay_of = replays(c, job)
    return {cid: original_checkpoint(replay_of, cid) for cid in replay_of}


def later_epochs(epoch_of: dict[int, int], checkpoint_id: int) -> frozenset[int]:
    """The checkpoints (of ``epochs``) whose epoch comes after ``checkpoint_id``'s, whatever their ids: what a
    rewind to ``checkpoint_id`` takes out of an append sink (0: before every epoch)."""
    position = epoch_of.get(checkpoint_id, checkpoint_id)
    return frozenset(cid for cid, epoch in epoch_of.items() if epoch > position)


def epoch_records(cuts: dict[int, dict[str, int]], replay_of: dict[int, int | None],
                  failed: Iterable[int] = ()) -> dict[int, int]:
    """Records each checkpoint's commit carries: its cut minus the previous original barrier's cut that was
    not ``failed``; a replay, those of the epoch it re-does. A FAILED checkpoint carries none: its records go
    with the next checkpoint that is not (a run resumes from the last completed one, so that one's epoch
    holds them). Without ``failed``: the records each barrier registered."""
    failed = set(failed)
    records: dict[int, int] = {}
    previous: dict[str, int] = {}
    for cid in sorted(cuts):
        if replay_of.get(cid) is None:
            cut = cuts[cid]
            records[cid] = sum(max(0, off - previous.get(p, 0)) for p, off in cut.items())
            if cid not in failed:
                previous = cut
    carried = 0  # a FAILED replay's epoch: redone by the next run, in the next checkpoint it completes
    for cid in sorted(cuts):
        original = original_checkpoint(replay_of, cid)
        own = records.get(original, 0)
        if cid in failed:
            records[cid], carried = 0, carried + own * (original != cid)
        else:
            records[cid], carried = own + carried, 0
    return records


def cuts(c, job: str) -> dict[int, dict[str, int]]:
    cuts: dict[int, dict[str, int]] = {}
    for cid, partition, offset in c.execute(
            select(SourceCut.checkpoint_id, SourceCut.partition, SourceCut.offset).where(SourceCut.job == job)):
        cuts.setdefault(int(cid), {})[partition] = int(offset)
    return cuts


def replays(c, job: str) -> dict[int, int | None]:
    return dict(c.execute(select(Checkpoint.checkpoint_id, Checkpoint.replay_of).where(Checkpoint.job == job)).all())


def failed(c, job: str) -> set[int]:
    return set(c.scalars(select(Checkpoint.checkpoint_id).where(
        Checkpoint.job == job, Checkpoint.status == CheckpointStatus.FAILED)))


def records(c, job: str) -> dict[int, int]:
    """The records each checkpoint's commit carries (``epoch_records``)."""
    return epoch_records(cuts(c, job), replays(c, job), failed(c, job))


def lineage(store: CheckpointStore, job: str, checkpoint_id: int | None,
            needed_for: str = "the epochs a state TTL counts are unknown") -> list[int]:
    """The checkpoints whose epochs, in order, produced ``checkpoint_id``'s state (``epoch_start``), in one
    query; [] for the empty state (None or 0). UsageError when a checkpoint on the way does not record where
    its epoch began (taken before revision 0006), saying what that leaves unknown (``needed_for``)."""
    if not checkpoint_id:
        return []
    with store.sessions() as s:
        starts = dict(s.execute(select(Checkpoint.checkpoint_id, Checkpoint.epoch_start).where(
            Checkpoint.job == job)).tuples().all())
    chain: list[int] = []
    n = checkpoint_id
    while n:
        chain.append(n)
        start = starts.get(n)
        if start is None or start >= n:
            raise UsageError(f"checkpoint {n} of job {job!r} does not record where its epoch began (taken before "
                             f"revision 0006): {needed_for}")
        n = start
    return chain[::-1]
