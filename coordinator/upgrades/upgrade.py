"""An upgrade: a job taken on to a new version of its declaration, without losing what it built.

An upgrade is a replay. It restores a checkpoint K of the job (the start of the input, by default,
when nothing is restored) into the job as declared now: operators whose stored state the new declaration
reads (``PartChange.restorable``) get K's state, the others start empty. Then every epoch after K, up to
the newest completed checkpoint and past it, runs again with the new declaration, under replay
checkpoints that supersede the old ones, as a recovery's do. What the sinks get follows the plan
(``coordinator.dataflow.changes``):

- an unchanged sink keeps its high-water marks: the replays' commits of what it holds are deduplicated;
- a new sink has none: it gets every replayed epoch's output, the backfill;
- an upsert sink with new columns is restated: its marks go back to K's cut and its table gains the
  columns, so the replays replace each key's row; an append sink with new columns is not (a record is
  never appended twice): records from now on have them;
- a sink fed by an operator that changed incompatibly is reverted to K, as a rewind reverts it, and its
  output after K is replaced by the replays'.

The reset (checkpoints superseded, replays created, sinks settled, the ``upgrades`` row) is one catalog
transaction; after it the replays are ordinary pending epochs, so a run killed at any point goes on with
``absreplay upgrade`` (or any processing run) and never writes a record twice. No Spark here.
"""

from __future__ import annotations

import getpass
import json
from dataclasses import asdict

from sqlalchemy import select

from coordinator.catalog.models import Recovery, Upgrade, utcnow
from coordinator.upgrades.job_plan import JobPlan
from coordinator.checkpoints import recovery
from coordinator.checkpoints.recovery import RecoveryResult, resolve
from coordinator.checkpoints.store import CheckpointStore
from coordinator.dataflow.changes import Change, PartChange
from coordinator.dataflow.jobs import JobDefinition
from coordinator.errors import UsageError
from coordinator.sinks.declarations import KafkaTopic, SqlTable

#: sink kinds whose target takes new columns in place (a SQL table is altered; a Kafka record is JSON)
EVOLVING = (SqlTable, KafkaTopic)


def start_point(store: CheckpointStore, job: JobDefinition, plan: JobPlan, from_start: bool,
                from_checkpoint: int | None) -> int:
    """The checkpoint whose cut the upgrade's replay starts at (0: the start of the input), or UsageError
    (exit 2, nothing written) naming why the upgrade cannot be made as asked."""
    if from_start and from_checkpoint is not None:
        raise UsageError("--from-start and --from-checkpoint are two starts: give one of them")
    if plan.changes is None or not plan.needs_upgrade:
        raise UsageError(f"job {job.name!r} needs no upgrade: {plan.next_step}")
    if plan.changes.unfit_sinks:
        part = plan.changes.unfit_sinks[0]
        raise UsageError(
            f"sink {part.name} changed incompatibly ({part.detail}): what it holds cannot take the new rows; "
            f"give the sink a new name and target (the old one is then removed and keeps its rows), or "
            f"undo the change")
    by_name = {s.name: s for s in job.sinks}
    for part in plan.changes.of(Change.COMPATIBLE):
        sink = by_name.get(part.name) if part.part == "sink" else None
        if sink is not None and sink.key is not None and not isinstance(sink.declaration, EVOLVING):
            raise UsageError(
                f"sink {part.name} ({part.detail}) is a {type(sink.declaration).__name__}, whose files cannot gain "
                f"a column in place: give it a new name and location, or undo the change")
    if plan.changes.incompatible and not from_start and from_checkpoint is None:
        names = ", ".join(p.name for p in plan.changes.incompatible)
        raise UsageError(
            f"job {job.name!r}: {names} changed incompatibly ({plan.changes.line()}): choose where its output is "
            f"rebuilt from: `absreplay upgrade {job.name} --from-start` (the start of the input) or "
            f"`--from-checkpoint N` (checkpoint N's state, its sinks' later output replaced), or undo the change")
    if from_checkpoint is None:
        return 0
    if from_checkpoint > plan.checkpoint_id:
        raise UsageError(f"--from-checkpoint {from_checkpoint} is after checkpoint {plan.checkpoint_id}, the newest "
                         f"completed one the upgrade is compared with")
    return resolve(store, job.name, from_checkpoint)


def sink_resets(job: JobDefinition, plan: JobPlan) -> dict[str, str]:
    """Each sink the reset settles (``recovery.reset_after``): reverted to the start as a rewind reverts it, or
    restated with its new columns; sinks not named keep their output and marks."""
    by_name = {s.name: s for s in job.sinks}
    resets = {}
    for part in plan.changes.parts:
        if part.part != "sink" or part.name not in by_name:
            continue
        if part.change is Change.INCOMPATIBLE:
            resets[part.name] = "revert"
        elif part.change is Change.COMPATIBLE and by_name[part.name].key is not None:
            resets[part.name] = "restate"
    return resets


def fresh_operators(plan: JobPlan) -> set[str]:
    """The stateful operators whose state a replay from the plan's checkpoint starts empty: new ones, and
    those whose stored state the new declaration does not read."""
    if plan.changes is None:
        return set()
    return {p.name for p in plan.changes.parts if p.part == "operator" and p.change is not Change.REMOVED
            and not p.restorable and p.change is not Change.UNCHANGED}


def row(plan: JobPlan, recovery_id: int, replayed_from: int, requested_by: str | None) -> Upgrade:
    """The ``upgrades`` row of an upgrade that carries out ``plan``, written with its reset."""
    return Upgrade(recovery_id=recovery_id, job=plan.job, from_version=plan.from_version, to_version=plan.to_version,
                   replayed_from=replayed_from, upgraded_checkpoint=plan.checkpoint_id,
                   parts=json.dumps([_done(p) for p in plan.changes.parts]),
                   requested_by=(requested_by or _user())[:250], created_at=utcnow())


def _done(part: PartChange) -> dict:
    return {k: v for k, v in asdict(part).items() if k != "restorable"}


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        return "unknown"


def unfinished(store: CheckpointStore, job: str, to_version: str) -> int | None:
    """The recovery id of the newest upgrade to ``to_version`` if it stopped after its reset (its row RUNNING
    when the process was killed, FAILED when it raised): its replays, or their sink commits, are still to do."""
    with store.sessions() as s:
        found = s.execute(select(Recovery.id, Recovery.result).join(Upgrade, Upgrade.recovery_id == Recovery.id)
                          .where(Upgrade.job == job, Upgrade.to_version == to_version)
                          .order_by(Recovery.id.desc()).limit(1)).first()
    return found.id if found is not None and found.result != RecoveryResult.SUCCEEDED else None


def resumed(store: CheckpointStore, job: str, recovery_id: int) -> None:
    """An unfinished upgrade carried on by a later `absreplay upgrade`: it ends SUCCEEDED, saying so, since
    what it set out to build is now built."""
    recovery.finish(store, recovery_id, RecoveryResult.SUCCEEDED,
                    detail=f"stopped after its reset; its replays were processed by a later `absreplay upgrade {job}`")
