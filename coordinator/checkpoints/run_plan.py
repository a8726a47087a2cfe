"""What a processing run will do, decided once: read from the catalog in one place and handed down.

A run (``absreplay process``, a recovery's catch-up after its reset, a restart after a lost
executor) asks the catalog here, under the job's lease, and nowhere else before its first epoch:

- the restore point: the checkpoint asked for (it must be COMPLETED), else the latest completed;
  a weak-consistency job resumes after the last epoch its sources read, each operator at its own
  head (``coordinator.checkpoints.weak``);
- the pending epochs after it, each with the segments between its cuts and the sources' dead
  letters among them (inject's: bad lines, duplicate ids), and the dead-letter figures its
  progress line shows;
- what the snapshots need: the job's full-snapshot period, and how many keys an epoch changed at
  the restore point. (The job row's key groups and incarnation are fixed for the job's life: the
  runner reads that row once, ``EpochRunner.job_row``.)

The epochs' cuts and segments are two queries, whatever the number of epochs. No Spark here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select

from coordinator.catalog import audit
from coordinator.catalog.models import Checkpoint, DeadLetter, SourceCut, SourceSegment
from coordinator.checkpoints import recovery, weak
from coordinator.checkpoints.lifecycle import CheckpointStatus
from coordinator.checkpoints.store import CheckpointStore
from coordinator.dataflow.jobs import JobDefinition
from coordinator.sinks.dead_letters import DeadLetters


@dataclass(frozen=True)
class EpochPlan:
    checkpoint_id: int
    segments: list[SourceSegment]
    dead_offsets: list[tuple[str, int]]
    #: the checkpoint's dead letters against its epoch's records, as inject and the view say them
    dead_letters: audit.EpochDeadLetters | None = None

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments) - len(self.dead_offsets)

    @property
    def dead_letter_note(self) -> str:
        """The epoch line's dead letters and their share: an epoch of refused records is not a quiet one."""
        return f"; {self.dead_letters.summary()}" if self.dead_letters and self.dead_letters.count else ""


@dataclass(frozen=True)
class RunPlan:
    job: JobDefinition
    #: the checkpoint whose state the run starts from (None: the empty state at the sources' start)
    restore_point: int | None
    epochs: list[EpochPlan]
    full_snapshot_every: int
    #: rows the restore point's epoch changed (its sink transaction's size): how big a delta is likely
    changed_rows_at_point: int = 0
    #: a weak job's operators, each at its own latest fully acked snapshot (None: not a weak job)
    heads: dict[str, int | None] | None = field(default=None)

    @property
    def weak(self) -> bool:
        return self.job.consistency == "weak"

    @property
    def epoch_starts(self) -> dict[int, int]:
        """Each pending epoch's start: the checkpoint before it (0: the sources' start)."""
        ids = [e.checkpoint_id for e in self.epochs]
        return dict(zip(ids, [self.restore_point or 0, *ids[:-1]], strict=True))


def source_dead_letters(store: CheckpointStore, job: JobDefinition) -> list[tuple[int, str, int]]:
    """(checkpoint, partition, offset) of the sources' dead letters (inject's: bad lines, duplicate ids),
    which no operator reads. A record an operator made a dead letter (a window's late one: its ``segment``
    is the operator) was dead for that operator alone: a replay or a recomputation reads it again, the
    window finds it late again, and every other operator reading the same source counts it."""
    operators = [s.declaration.operator for s in job.sinks if isinstance(s.declaration, DeadLetters)]
    with store.sessions() as s:
        return [tuple(row) for row in s.execute(
            select(DeadLetter.checkpoint_id, DeadLetter.partition, DeadLetter.offset).where(
                DeadLetter.job == job.name, DeadLetter.segment.not_in(operators)))]


def _cuts(store: CheckpointStore, job: str, ids: list[int]) -> dict[int, dict[str, int]]:
    """Each checkpoint's cut (partition -> offset), in one query."""
    cuts: dict[int, dict[str, int]] = {i: {} for i in ids}
    with store.sessions() as s:
        for ck, partition, offset in s.execute(
                select(SourceCut.checkpoint_id, SourceCut.partition, SourceCut.offset).where(
                    SourceCut.job == job, SourceCut.checkpoint_id.in_(ids))):
            cuts[ck][partition] = offset
    return cuts


def epoch_between(segments: list[SourceSegment], dead: list[tuple[int, str, int]], start: dict[str, int],
                  end: dict[str, int], checkpoint_id: int) -> EpochPlan:
    """The records between two cuts as one epoch: the segments in [start, end) per partition (cuts fall on
    segment bounds) and the sources' dead letters among them."""
    inside = sorted((seg for seg in segments if start.get(seg.partition, 0) <= seg.first_offset
                     < end.get(seg.partition, 0)), key=lambda seg: (seg.partition, seg.first_offset))
    offsets = [(p, o) for _, p, o in dead if start.get(p, 0) <= o < end.get(p, 0)]
    return EpochPlan(checkpoint_id, inside, offsets)


def segments_of(store: CheckpointStore, job: str) -> list[SourceSegment]:
    with store.sessions() as s:
        return list(s.scalars(select(SourceSegment).where(SourceSegment.job == job)))


def replayed(store: CheckpointStore, job: JobDefinition, after: int | None) -> list[EpochPlan]:
    """The epochs a recovery to checkpoint ``after`` reads again, known before it resets anything: the
    records up to each PENDING or COMPLETED checkpoint after it (``recovery.superseded_by``), each epoch
    under that checkpoint's id (its replay gets a new one). Without dead letters: for checking the segments."""
    with store.sessions() as s:
        ids = list(s.scalars(select(Checkpoint.checkpoint_id).where(
            Checkpoint.job == job.name, Checkpoint.checkpoint_id > (after or 0),
            Checkpoint.status.in_([CheckpointStatus.PENDING, CheckpointStatus.COMPLETED]),
        ).order_by(Checkpoint.checkpoint_id)))
    if not ids:
        return []
    cuts, segments = _cuts(store, job.name, [after or 0, *ids]), segments_of(store, job.name)
    return [epoch_between(segments, [], cuts[start], cuts[ck], ck)
            for start, ck in zip([after or 0, *ids[:-1]], ids, strict=True)]


def by_barrier(store: CheckpointStore, job: str, segments: list[SourceSegment]) -> dict[int, list[SourceSegment]]:
    """``segments`` by the barrier that registered them, the epoch they belong to: the first checkpoint whose
    cut lies past their first offset (``epoch_between``'s rule), in one query."""
    with store.sessions() as s:
        cuts = s.execute(select(SourceCut.checkpoint_id, SourceCut.partition, SourceCut.offset).where(
            SourceCut.job == job).order_by(SourceCut.checkpoint_id)).all()
    out: dict[int, list[SourceSegment]] = {}
    for seg in segments:
        barrier = next(ck for ck, p, o in cuts if p == seg.partition and o > seg.first_offset)
        out.setdefault(barrier, []).append(seg)
    return dict(sorted(out.items()))


def read(store: CheckpointStore, job: JobDefinition, restore_from: int | None = None,
         max_epochs: int | None = None, restored: int | None = None) -> RunPlan:
    """The run's plan. ``restore_from``: the completed checkpoint asked for (else the latest; an unknown or
    unfinished one is CheckpointNotFoundError, exit 2); ``restored``: the checkpoint a recovery has restored
    already (0: the empty state); ``max_epochs``: at most this many pending epochs."""
    if restored is not None:
        point = restored or None
    elif job.consistency == "weak":
        point = weak.consumed_through(store, job) or None
    else:
        point = recovery.resolve(store, job.name, restore_from)
    pending = store.pending_after(job.name, point or 0)[:max_epochs]
    ids = [ck.checkpoint_id for ck in pending]
    epochs = []
    if ids:
        cuts, segments, dead = _cuts(store, job.name, [point or 0, *ids]), segments_of(store, job.name), \
            source_dead_letters(store, job)
        starts = [point or 0, *ids[:-1]]
        figures = audit.epoch_dead_letters(store.engine, job.name, ids)
        epochs = [epoch_between(segments, dead, cuts[start], cuts[ck], ck)
                  for start, ck in zip(starts, ids, strict=True)]
        epochs = [EpochPlan(e.checkpoint_id, e.segments, e.dead_offsets, figures[e.checkpoint_id]) for e in epochs]
    return RunPlan(
        job=job, restore_point=point, epochs=epochs, full_snapshot_every=store.policy(job.name).full_snapshot_every,
        changed_rows_at_point=store.sink_rows(job.name, point) if point and ids else 0,
        heads=weak.heads(store, job) if job.consistency == "weak" else None,
    )
