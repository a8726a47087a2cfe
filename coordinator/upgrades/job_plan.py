"""The plan of a changed job: its declaration on disk against the version a checkpoint was taken with
(``coordinator.dataflow.changes``), and the check that stops a run, recovery or rewind of a changed job
before it starts, with that plan, rather than failing on the state it cannot find.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import select

from coordinator.catalog.models import Checkpoint, JobVersionRow, Recovery, Upgrade
from coordinator.checkpoints.store import CheckpointStore
from coordinator.dataflow.changes import JobChanges, compare
from coordinator.dataflow.jobs import JobDefinition
from coordinator.dataflow.versions import version_of
from coordinator.errors import UsageError


@dataclass(frozen=True)
class JobPlan:
    job: str
    #: the checkpoint compared with (None: none has completed, nothing to carry over)
    checkpoint_id: int | None
    #: the version that checkpoint was taken with (None: taken before versions were recorded)
    from_version: str | None
    to_version: str
    #: None when there is nothing to compare with
    changes: JobChanges | None

    @property
    def needs_upgrade(self) -> bool:
        return self.changes is not None and self.changes.needs_upgrade

    @property
    def next_step(self) -> str:
        """What the user does next, in one sentence."""
        if self.checkpoint_id is None:
            return "no checkpoint has completed yet: the next run starts from the empty state"
        if self.changes is None:
            return (f"checkpoint {self.checkpoint_id} was taken before versions were recorded: nothing to "
                    f"compare with, the next run restores it as it is")
        if not self.needs_upgrade:
            return f"the next run goes ahead from checkpoint {self.checkpoint_id}"
        if self.changes.unfit_sinks:
            return (f"sink {', '.join(p.name for p in self.changes.unfit_sinks)} cannot take the new rows over what it holds: give it a new name and "
                    f"target (the old one is then removed and keeps its rows), or undo the change")
        if self.changes.incompatible:
            names = ", ".join(p.name for p in self.changes.incompatible)
            return (f"a choice is needed for {names}: `absreplay upgrade {self.job} --from-start` rebuilds "
                    f"it from the start of the input, `--from-checkpoint N` from checkpoint N's cut (its sinks' "
                    f"later output replaced), or undo the change")
        return (f"`absreplay upgrade {self.job}` carries the state over and builds the rest from the input; "
                f"until then the job does not run")


class JobChangedError(UsageError):
    """A run, recovery or rewind of a job whose declaration changed in a way the stored state cannot take."""

    def __init__(self, plan: JobPlan) -> None:
        super().__init__(
            f"job {plan.job!r} changed since checkpoint {plan.checkpoint_id} (version {plan.from_version} -> "
            f"{plan.to_version}): {plan.changes.line()}; nothing was run. {plan.next_step[0].upper()}"
            f"{plan.next_step[1:]} (`absreplay plan {plan.job}` shows the plan)")
        self.plan = plan


def plan(store: CheckpointStore, job: JobDefinition, checkpoint_id: int | None = None) -> JobPlan:
    """``job`` as declared now against checkpoint ``checkpoint_id`` (default: the newest completed one)."""
    to_version = version_of(job)
    if checkpoint_id is None:
        latest = store.latest_completed(job.name)
        if latest is None:
            return JobPlan(job.name, None, None, to_version.digest, None)
        checkpoint_id = latest.checkpoint_id
    with store.sessions() as s:
        digest = s.scalar(select(Checkpoint.job_version).where(Checkpoint.job == job.name,
                                                                Checkpoint.checkpoint_id == checkpoint_id))
        row = None if digest is None else s.get(JobVersionRow, (job.name, digest))
    if row is None:
        return JobPlan(job.name, checkpoint_id, digest, to_version.digest, None)
    return JobPlan(job.name, checkpoint_id, digest, to_version.digest, compare(json.loads(row.parts), to_version.parts))


def check_unchanged(store: CheckpointStore, job: JobDefinition, checkpoint_id: int | None) -> None:
    """JobChangedError (exit 2) when restoring ``checkpoint_id`` (None: nothing to restore) into ``job`` as
    declared now needs an upgrade first, and no upgrade to it is under way from there."""
    if checkpoint_id is None:
        return
    found = plan(store, job, checkpoint_id)
    if found.needs_upgrade and not under_way(store, job.name, found.to_version, checkpoint_id):
        raise JobChangedError(found)


def under_way(store: CheckpointStore, job: str, to_version: str, restore_point: int | None) -> bool:
    """Whether an upgrade to ``to_version`` reset the job to ``restore_point`` and its replays are what a run
    from there processes: then that run carries the upgrade on, and is no changed job to stop."""
    with store.sessions() as s:
        found = s.scalars(select(Upgrade).join(Recovery, Recovery.id == Upgrade.recovery_id).where(
            Upgrade.job == job, Upgrade.to_version == to_version).order_by(Upgrade.recovery_id.desc()).limit(1)).first()
    return found is not None and found.replayed_from == (restore_point or 0)
