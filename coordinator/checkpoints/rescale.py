"""Changing a job's parallelism between runs: the catalog's side (no Spark here).

Keyed state is kept in key groups, as Flink does: a key belongs to group
pmod(hash(key), max_parallelism), and at parallelism p subtask i holds the
contiguous groups g with g * p // max_parallelism = i
(``spark_jobs.state.keyed_state.subtask_of``). ``max_parallelism`` is the job row's
(128 unless set before the job's first checkpoint) and never changes, so a key
keeps its group whatever the parallelism; a run may take another parallelism
than the checkpoint it restores, which reads every old subtask's files and
splits the state by the new rule.

This module answers: at which parallelism a run executes the job (and whether
it may), at which one a checkpoint was taken, and which one the job row's
execution graph has.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from coordinator.catalog.models import Job
from coordinator.dataflow.jobs import JobDefinition, check_parallelism

if TYPE_CHECKING:
    from coordinator.checkpoints.store import CheckpointStore


def run_definition(store: CheckpointStore, definition: JobDefinition, requested: int | None) -> JobDefinition:
    """The job as a run executes it: at ``requested`` parallelism (``--parallelism``, else
    ``ABS_PARALLELISM``), None: as defined. UsageError (exit 2) above its max_parallelism.
    The job row must exist (``CheckpointStore.register_job``)."""
    job = store.job(definition.name)
    assert job is not None, f"job {definition.name!r} is not registered"
    parallelism = definition.parallelism if requested is None else requested
    check_parallelism(job.name, parallelism, job.max_parallelism)
    return definition if parallelism == definition.parallelism else definition.with_parallelism(parallelism)


def graph_parallelism(job: Job, operator: str) -> int:
    """``operator``'s parallelism in the job row's execution graph (the one the last run used)."""
    graph = json.loads(job.execution_graph)
    return next(o["parallelism"] for o in graph["operators"] if o["name"] == operator)


def taken_at(store: CheckpointStore, job_name: str, checkpoint_id: int, operator: str) -> int:
    """The parallelism checkpoint ``checkpoint_id`` was taken at: recorded with it, or (a checkpoint
    taken before that was recorded) how many subtasks of ``operator`` acked it."""
    recorded = store.checkpoint(job_name, checkpoint_id).parallelism
    if recorded is not None:
        return recorded
    return len({a.subtask for a in store.acks(job_name, checkpoint_id) if a.operator == operator})


def pending_at_other_parallelism(store: CheckpointStore, job_name: str, after: int, parallelism: int) -> list[int]:
    """PENDING checkpoints after ``after`` that a run at another parallelism took: the acks it left
    belong to other subtasks (a partial recovery cannot keep them)."""
    return [ck.checkpoint_id for ck in store.pending_after(job_name, after)
            if ck.parallelism is not None and ck.parallelism != parallelism]
