"""Weak-consistency jobs (seed 003, "弱一致性快照"): what the catalog says of where they are (no Spark here).

A job declared ``consistency="weak"`` gives up exactly-once, on purpose and by name:

- its sources are not rewound: a source subtask acks epoch n when it reads it (its
  offsets move on, as a consumer committing on read does), so a run resumes after
  the last epoch any run read, whatever became of that epoch's state;
- each stateful operator snapshots on its own and acks alone, in its own
  transaction, without waiting for the others: a run restores each operator from
  its own latest acked snapshot (its *head*), whatever checkpoint that is and
  whether or not that checkpoint completed;
- sinks are written directly, epoch by epoch (no staging, no two-phase commit).

So after a failure the records an operator processed since its head are lost to it
(and the epoch being read when the process died is lost to all), while nothing is
ever processed twice: lost records, never duplicates. ``absreplay recover``,
``rewind`` and ``verify`` need a consistent global checkpoint and refuse such a job.
"""

from __future__ import annotations

from coordinator.modes import SnapshotMode
from coordinator.checkpoints.store import CheckpointStore
from coordinator.dataflow.graph import OperatorKind
from coordinator.dataflow.jobs import JobDefinition
from coordinator.errors import UsageError

#: how a weak job is named wherever it shows: a run's first line, ``absreplay jobs``, its DAGs' docs and
#: its pages in the Airflow view (its checkpoints record the snapshot mode "weak")
LABEL = "weak consistency: loses records on failure, never duplicates them; not exactly-once"


def _fully_acked(store: CheckpointStore, job: JobDefinition, operators: set[str]) -> dict[str, set[int]]:
    """operator -> the checkpoints that every one of its subtasks acked (as many as the parallelism
    the checkpoint was taken at)."""
    parallelism = {c.checkpoint_id: c.parallelism for c in store.checkpoints(job.name)}
    acked: dict[tuple[str, int], set[int]] = {}
    for a in store.all_acks(job.name):
        if a.operator in operators:
            acked.setdefault((a.operator, a.checkpoint_id), set()).add(a.subtask)
    out: dict[str, set[int]] = {op: set() for op in operators}
    for (op, ck), subtasks in acked.items():
        if subtasks == set(range(parallelism.get(ck) or job.parallelism)):
            out[op].add(ck)
    return out


def heads(store: CheckpointStore, job: JobDefinition) -> dict[str, int | None]:
    """Each stateful operator's latest snapshot that every one of its subtasks acked (None: none yet)."""
    done = _fully_acked(store, job, {spec.operator for spec in job.states})
    return {spec.operator: max(done[spec.operator], default=None) for spec in job.states}


def consumed_through(store: CheckpointStore, job: JobDefinition) -> int:
    """The last epoch every source subtask read (0: none): the run after it starts with the next one."""
    done = _fully_acked(store, job, {op.name for op in job.graph.operators if op.kind is OperatorKind.SOURCE})
    return max(set.intersection(*done.values()), default=0)


def refuse(job: JobDefinition, what: str) -> None:
    """UsageError (exit 2) for a command that needs a consistent checkpoint, on a weak job."""
    if job.consistency == "weak":
        raise UsageError(
            f"job {job.name!r} is declared consistency='weak' ({LABEL}): each run restores every operator "
            f"from its own latest snapshot, so there is no consistent checkpoint to {what}")


def check_run(job: JobDefinition, snapshot_mode: str, restore_from: int | None = None) -> None:
    """What a processing run of a weak job cannot be asked for (UsageError, exit 2, before Spark)."""
    if job.consistency != "weak":
        return
    if restore_from is not None:
        refuse(job, "restore with --restore-from")
    if snapshot_mode == SnapshotMode.SYNC:
        raise UsageError(f"job {job.name!r} is declared consistency='weak': its operators snapshot on their own, "
                         f"asynchronously; --snapshot-mode sync is for exactly-once jobs")


def resume_point(store: CheckpointStore, job: JobDefinition) -> int:
    """Where a processing run starts: after the last completed checkpoint, or (weak) after the last
    epoch the sources read."""
    if job.consistency == "weak":
        return consumed_through(store, job)
    latest = store.latest_completed(job.name)
    return latest.checkpoint_id if latest else 0
