"""Recovery and rewind in the catalog: the audited record, and the reset that lets a
processing run resume from an older checkpoint (no Spark here).

A recovery restores every task from checkpoint N, then resumes. What happens to
the checkpoints after N depends on what they are:

- PENDING ones after N (a crashed attempt) are simply processed again: their
  half-written acks are dropped and their staged sink output is aborted;
- if COMPLETED checkpoints follow N (recovery to an older checkpoint, or a
  rewind), every non-failed checkpoint after N is SUPERSEDED and a *replay*
  checkpoint with the same cut is created for each, in order, with fresh ids
  (ids only grow). The replays are what the resumed run processes.

``recover`` keeps the sink as it is: a replay whose output the sink already
holds (its cut is at or below the sink's high-water marks) is DEDUPLICATED at
commit, never written twice. ``rewind`` (after a bug fix) puts the sink back to
checkpoint N first (rows written after N are reverted to N's values or
deleted; an append sink loses the rows of every epoch after N's, whichever ids
stamp them; the high-water marks go back to N's cut) so the replays' output
replaces the old output instead of adding to it.

A request refused before anything changed (a processing run holds the job's
lease, the checkpoint is not COMPLETED) is a REFUSED row with its reason
(``refuse``). ``preview`` says beforehand what a recovery would change, with
the same rule ``reset_after`` applies (``superseded_by``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum

import pyarrow as pa
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from coordinator.catalog import epochs
from coordinator.sinks import transactions as sinks
from coordinator.catalog.models import Checkpoint, Job, Recovery, SinkTransaction, SourceCut, Upgrade, utcnow
from coordinator.errors import AbsError, CatalogUnavailableError, CheckpointNotFoundError, UsageError
from coordinator.dataflow.jobs import JobDefinition
from coordinator.checkpoints.lifecycle import CheckpointEvent, CheckpointStatus, SinkTxnStatus, transition
from coordinator.modes import RecoveryKind, RecoveryMode
from coordinator.checkpoints.store import CheckpointStore


class RecoveryResult(StrEnum):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    #: stopped before anything changed; ``detail`` says why
    REFUSED = "REFUSED"


@dataclass
class ResetOutcome:
    superseded: list[int] = field(default_factory=list)
    #: new checkpoint id -> the superseded checkpoint whose epoch it re-does
    replays: dict[int, int] = field(default_factory=dict)
    committed: list[int] = field(default_factory=list)
    aborted: list[int] = field(default_factory=list)
    reverted_rows: int = 0


def start(store: CheckpointStore, job: str, kind: RecoveryKind, mode: RecoveryMode, requested: int | None,
          airflow_run_id: str | None = None) -> int:
    """Record a recovery as RUNNING. Called under the job's processing lease, so any other
    RUNNING row of the job belongs to a process that died: it is marked FAILED."""
    with store.sessions.begin() as s:
        s.execute(
            update(Recovery)
            .where(Recovery.job == job, Recovery.result == RecoveryResult.RUNNING)
            .values(result=RecoveryResult.FAILED, finished_at=utcnow(), detail="interrupted: the process died")
        )
        row = Recovery(job=job, kind=kind, mode=mode, requested_checkpoint_id=requested, superseded=0,
                       back_edge_records=0, result=RecoveryResult.RUNNING, started_at=utcnow(),
                       airflow_run_id=airflow_run_id)
        s.add(row)
        s.flush()
        return row.id


def is_refusal(exc: BaseException) -> bool:
    """A request refused before anything changed: bad input (exit 2: a checkpoint that is not COMPLETED, a
    lease held by another run); an unreachable catalog is no answer to the request."""
    return isinstance(exc, AbsError) and exc.exit_code == 2 and not isinstance(exc, CatalogUnavailableError)


def refuse(store: CheckpointStore, job: str, kind: str, mode: str, requested: int | None, reason: str,
           airflow_run_id: str | None = None) -> int | None:
    """Record a refused request as REFUSED with its reason; None when the catalog has no such job
    (there is nothing to audit a request against)."""
    now = utcnow()
    with store.sessions.begin() as s:
        if s.get(Job, job) is None:
            return None
        row = Recovery(job=job, kind=str(kind)[:16], mode=str(mode)[:16], requested_checkpoint_id=requested,
                       superseded=0, back_edge_records=0, result=RecoveryResult.REFUSED, started_at=now,
                       finished_at=now, detail=reason[:4000], airflow_run_id=airflow_run_id)
        s.add(row)
        s.flush()
        return row.id


@contextmanager
def refusals_recorded(store: CheckpointStore, job: str, kind: str, mode: str, requested: int | None,
                      airflow_run_id: str | None = None) -> Iterator[None]:
    """Record a refusal raised inside (``is_refusal``) as REFUSED with its reason (``refuse``), and re-raise it:
    each step that checks a request again (the command line, the processing application) audits what it refuses."""
    try:
        yield
    except Exception as exc:
        if is_refusal(exc):
            refuse(store, job, kind, mode, requested, str(exc), airflow_run_id)
        raise


def running(s: Session, job: str) -> Recovery | None:
    """The job's recovery in progress (a RUNNING row), if any."""
    return s.scalars(select(Recovery).where(Recovery.job == job, Recovery.result == RecoveryResult.RUNNING)
                     .order_by(Recovery.id.desc()).limit(1)).first()


def of_airflow_run(store: CheckpointStore, job: str, airflow_run_id: str) -> dict | None:
    """The last recovery row the recover DAG's run ``airflow_run_id`` left (its refusal, failure or result)."""
    rows = history(store, job, airflow_run_id)
    return rows[-1] if rows else None


def finish(store: CheckpointStore, recovery_id: int, result: RecoveryResult, *, restored: int | None = None,
           detail: str | None = None, back_edge_records: int | None = None) -> None:
    """End the recovery row: the newest completed checkpoint is where the job now stands."""
    with store.sessions() as s:
        job = s.get(Recovery, recovery_id).job
    # read before the write transaction: SQLite allows one writer, even within this process
    latest = store.latest_completed(job)
    with store.sessions.begin() as s:
        row = s.get(Recovery, recovery_id)
        row.result, row.finished_at = result, utcnow()
        row.to_checkpoint_id = latest.checkpoint_id if latest else None
        if restored is not None:
            row.from_checkpoint_id = restored
        if detail is not None:
            row.detail = detail[:4000]
        if back_edge_records is not None:
            row.back_edge_records = back_edge_records


def resolve(store: CheckpointStore, job: str, requested: int | None) -> int | None:
    """The checkpoint to restore: the one asked for (it must be COMPLETED), else the latest completed;
    None when none has completed yet: the empty state at the start of the sources (as Flink restarts
    a job that has no checkpoint)."""
    if requested is None:
        latest = store.latest_completed(job)
        return latest.checkpoint_id if latest else None
    ck = store.checkpoint(job, requested)
    if ck.status != CheckpointStatus.COMPLETED:
        raise CheckpointNotFoundError(job, requested, f"is {ck.status}, not COMPLETED: only completed checkpoints can be restored")
    return requested


def previous_completed(store: CheckpointStore, job: str, before: int) -> int | None:
    """The completed checkpoint before ``before`` (the --fallback target)."""
    older = [c.checkpoint_id for c in store.checkpoints(job)
             if c.status == CheckpointStatus.COMPLETED and c.checkpoint_id < before]
    return older[-1] if older else None


def reset_after(
    store: CheckpointStore,
    definition: JobDefinition,
    restored: int | None,
    recovery_id: int,
    kind: RecoveryKind,
    state_rows: dict[str, pa.Table] | None = None,
    sink_resets: dict[str, str] | None = None,
    upgrade_row: Upgrade | None = None,
) -> ResetOutcome:
    """Settle the sinks and put the checkpoints after ``restored`` in order for the resumed run,
    in one transaction under the job lock (a concurrent barrier waits, then lands after the replays).

    ``state_rows``: for a rewind, each upsert sink's view of checkpoint ``restored`` (its columns
    and ``updated``), the values rows written later are reverted to; append sinks drop what the
    checkpoints of later epochs appended. ``restored`` None: the empty state
    (nothing had completed), every checkpoint comes after it.

    ``sink_resets`` (an upgrade): sink -> "revert" (as a rewind does) or "restate" (its high-water marks
    back to ``restored``'s cut, its rows left for the replays to replace, its table given the declared
    columns); a rewind reverts every sink. ``upgrade_row``: the upgrade's own row, written with the reset.
    """
    out = ResetOutcome()
    job = definition.name
    after = restored or 0
    with store.sessions.begin() as s:
        job_row = store.lock_job(s, job)
        # pre-committed output of completed checkpoints reaches the sink; failed checkpoints' is aborted,
        # and so is output after the restore point whose files fail verification: its epoch is replayed
        out.committed, out.aborted = sinks.settle(s, definition, replayed_after=after,
                                                  commit_replayed=kind is not RecoveryKind.UPGRADE)
        later = list(s.scalars(
            select(Checkpoint).where(Checkpoint.job == job, Checkpoint.checkpoint_id > after)
            .order_by(Checkpoint.checkpoint_id)
        ))
        live = superseded_by(kind, later)
        # staged output of checkpoints that will be processed again is aborted (re-staged by the run)
        for txn in s.scalars(select(SinkTransaction).where(
            SinkTransaction.job == job, SinkTransaction.checkpoint_id > after,
            SinkTransaction.status == SinkTxnStatus.STAGED,
        )):
            sinks.abort(txn)
            out.aborted.append(txn.checkpoint_id)
        resets = dict.fromkeys(definition.sink_operators, "revert") if kind is RecoveryKind.REWIND else \
            sink_resets or {}
        cut = store_cut(s, job, after)
        for sink in definition.sinks:
            if resets.get(sink.name) == "revert":
                out.reverted_rows += sinks.revert_after(s, job, sink, after, cut, (state_rows or {}).get(sink.name))
            elif resets.get(sink.name) == "restate":
                sinks.restate_after(s, job, sink, after, cut)
        if upgrade_row is not None:
            s.add(upgrade_row)
        if live:
            now = utcnow()
            for ck in live:
                ck.status = transition(CheckpointStatus(ck.status), CheckpointEvent.SUPERSEDE)
                ck.superseded_at, ck.recovery_id = now, recovery_id
                out.superseded.append(ck.checkpoint_id)
            for old in live:
                new_id = job_row.last_checkpoint_id + 1
                job_row.last_checkpoint_id = new_id
                s.add(Checkpoint(job=job, checkpoint_id=new_id, status=CheckpointStatus.PENDING,
                                 total_tasks=job_row.total_tasks, triggered_at=now,
                                 replay_of=old.checkpoint_id, recovery_id=recovery_id))
                s.flush()
                s.add_all(SourceCut(job=job, checkpoint_id=new_id, partition=p, offset=o)
                          for p, o in sorted(store_cut(s, job, old.checkpoint_id).items()))
                out.replays[new_id] = old.checkpoint_id
        row = s.get(Recovery, recovery_id)
        row.from_checkpoint_id, row.superseded = restored, len(out.superseded)
    return out


def superseded_by(kind: RecoveryKind, later: list[Checkpoint]) -> list[Checkpoint]:
    """Which of the checkpoints after the restore point (in id order) a recovery supersedes, each then
    re-done by a replay: the live ones (PENDING, COMPLETED) for a rewind, or when a COMPLETED one is among
    them, or for an upgrade; none when only a crashed attempt's PENDING ones follow (they are simply processed again)."""
    live = [c for c in later if c.status in (CheckpointStatus.PENDING, CheckpointStatus.COMPLETED)]
    if kind in (RecoveryKind.REWIND, RecoveryKind.UPGRADE) or any(c.status == CheckpointStatus.COMPLETED for c in live):
        return live
    return []


@dataclass
class SinkOutput:
    """A sink's committed output of the checkpoints after a restore point."""

    sink: str
    checkpoints: list[int] = field(default_factory=list)
    rows: int = 0


@dataclass(frozen=True)
class RecoveryPreview:
    """What a recovery would change, read before it is asked for."""

    kind: RecoveryKind
    #: the checkpoint it restores (None: the empty state, none has completed)
    restores: int | None
    #: the checkpoints it supersedes (each re-done by a replay with a new id)
    superseded: list[int]
    #: the sinks' committed output of epochs after ``restores`` still in them: replaced for a rewind; kept
    #: for a recover (replays of epochs the sink holds are deduplicated)
    later_output: list[SinkOutput]
    #: the PENDING checkpoints after ``restores`` it does not supersede: the resumed run processes them
    #: under their own ids (a crashed attempt's acks dropped, its staged output aborted)
    processed_again: list[int] = field(default_factory=list)


def preview(store: CheckpointStore, job: str, kind: RecoveryKind, mode: RecoveryMode,
            requested: int | None) -> RecoveryPreview:
    """What ``kind`` from ``requested`` would change (reads only; refuses as ``validate`` does): the
    checkpoints ``reset_after`` would supersede (``superseded_by`` on the same rows), the PENDING ones the
    resumed run processes as they are, and each sink's output of later epochs that is in it now."""
    target = validate(store, job, kind, mode, requested)
    after = target or 0
    with store.sessions() as s:
        later = list(s.scalars(select(Checkpoint).where(Checkpoint.job == job, Checkpoint.checkpoint_id > after)
                               .order_by(Checkpoint.checkpoint_id)))
        superseded = [c.checkpoint_id for c in superseded_by(kind, later)]
        output = s.execute(
            select(SinkTransaction.sink, SinkTransaction.checkpoint_id, SinkTransaction.rows,
                   SinkTransaction.finished_at)
            .where(SinkTransaction.job == job, SinkTransaction.status == SinkTxnStatus.COMMITTED)
            .order_by(SinkTransaction.sink, SinkTransaction.checkpoint_id)).all()
        epoch_of = epochs.epochs(s, job)
        rewinds = s.execute(select(Recovery.from_checkpoint_id, Recovery.started_at).where(
            Recovery.job == job, Recovery.kind == RecoveryKind.REWIND, Recovery.from_checkpoint_id.is_not(None),
            Recovery.result != RecoveryResult.REFUSED)).all()
    processed_again = [c.checkpoint_id for c in later
                       if c.status == CheckpointStatus.PENDING and c.checkpoint_id not in superseded]
    # what a rewind to ``after`` takes out, by the rule its revert applies (``sinks.revert_after``)
    replaced = epochs.later_epochs(epoch_of, after)
    reverts = [(epochs.later_epochs(epoch_of, back), started) for back, started in rewinds]
    sinks_out: dict[str, SinkOutput] = {}
    for sink, checkpoint_id, rows, finished_at in output:
        # a later rewind to an earlier epoch already put the sink back: that output is no longer in it
        reverted = any(checkpoint_id in gone and finished_at is not None and started > finished_at
                       for gone, started in reverts)
        if checkpoint_id in replaced and not reverted:
            out = sinks_out.setdefault(sink, SinkOutput(sink))
            out.checkpoints.append(checkpoint_id)
            out.rows += rows
    return RecoveryPreview(kind, target, superseded, list(sinks_out.values()), processed_again)


def store_cut(s: Session, job: str, checkpoint_id: int) -> dict[str, int]:
    return dict(s.execute(
        select(SourceCut.partition, SourceCut.offset).where(SourceCut.job == job, SourceCut.checkpoint_id == checkpoint_id)
    ).all())


def history(store: CheckpointStore, job: str, airflow_run_id: str | None = None) -> list[dict]:
    """The job's recoveries (those one Airflow run asked for, when given), oldest first (also plain SQL:
    ``SELECT * FROM recoveries``)."""
    query = select(Recovery).where(Recovery.job == job)
    if airflow_run_id is not None:
        query = query.where(Recovery.airflow_run_id == airflow_run_id)
    with store.sessions() as s:
        rows = s.scalars(query.order_by(Recovery.id)).all()
        return [
            {c: getattr(r, c) for c in ("id", "kind", "mode", "requested_checkpoint_id", "from_checkpoint_id",
                                        "to_checkpoint_id", "superseded", "back_edge_records", "started_at",
                                        "finished_at", "result", "detail", "airflow_run_id")}
            for r in rows
        ]


def partial_heads(store: CheckpointStore, job: str, operators: list[str], parallelism: int,
                  restored: int) -> dict[int, int]:
    """Partial recovery (paper section 5): for each subtask index whose tasks all acked the pending
    checkpoints right after ``restored`` before the failure, the last of those it acked. Those
    tasks did not fail: they keep their state; only the others (and, through the hash shuffle,
    every upstream task) run again."""
    heads: dict[int, int] = {}
    running = set(range(parallelism))  # subtasks whose acks are contiguous so far
    for ck in store.pending_after(job, restored):
        acked = {(a.operator, a.subtask) for a in store.acks(job, ck.checkpoint_id)}
        running = {i for i in running if all((op, i) in acked for op in operators)}
        if not running:
            break
        heads.update(dict.fromkeys(running, ck.checkpoint_id))
    return heads


def validate(store: CheckpointStore, job: str, kind: RecoveryKind, mode: RecoveryMode,
             requested: int | None) -> int | None:
    """Check a request before anything starts (UsageError / CheckpointNotFoundError: exit 2);
    returns the checkpoint it would restore (None: the empty state, no checkpoint has completed; for an
    upgrade, ``requested`` None or 0 is the start of the input)."""
    if kind is RecoveryKind.UPGRADE:
        return None if not requested else resolve(store, job, requested)
    target = resolve(store, job, requested)
    if target is None and kind is RecoveryKind.REWIND:
        raise UsageError(f"job {job!r} has no completed checkpoint to rewind to")
    if mode is RecoveryMode.PARTIAL:
        if kind is RecoveryKind.REWIND:
            raise UsageError("a rewind reprocesses every task: --mode partial does not apply")
        latest = store.latest_completed(job)
        if latest is not None and target != latest.checkpoint_id:
            raise UsageError(
                f"partial recovery resumes the failed tasks from the latest completed checkpoint "
                f"({latest.checkpoint_id}); recovering from checkpoint {target} needs --mode full"
            )
    return target
