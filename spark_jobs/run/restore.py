"""Restore a checkpoint: every stateful operator's keyed state, its windows' watermarks and the
back-edge log, each file checked against its ack (``StateIntegrityError`` names a bad one)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession

from coordinator.checkpoints import rescale, state_chain
from coordinator.upgrades import job_plan, upgrade
from coordinator.checkpoints.state_chain import ChainLink
from coordinator.checkpoints.store import CheckpointStore
from coordinator.dataflow.jobs import JobDefinition
from coordinator.errors import StateIntegrityError
from coordinator.dataflow.graph import OperatorKind
from spark_jobs.run import back_edge_log
from spark_jobs.state import keyed_state
from spark_jobs.operators import ttl
from spark_jobs.operators.dataflow import Dataflow


def log(msg: str) -> None:
    print(msg, file=sys.stdout, flush=True)


@dataclass
class Restored:
    """Restored operator state, verified: where it comes from and the files it was read from."""

    checkpoint_id: int | None
    #: operator -> its state
    states: dict[str, DataFrame]
    #: operator -> its chain of files
    links: dict[str, list[ChainLink]]
    #: operator -> the longest chain of snapshots since a full one
    chain_lengths: dict[str, int]
    #: subtask -> the checkpoint its state is at (later than checkpoint_id after a partial recovery)
    heads: dict[int, int]
    #: jobs with a loop: back-edge log of checkpoint_id (verified), the loop head's first input
    back_edge: DataFrame | None = None
    back_edge_records: int = 0
    #: the parallelism checkpoint_id was taken at (None: no checkpoint)
    parallelism: int | None = None
    #: window operator -> its watermark at checkpoint_id
    watermarks: dict[str, int | None] = field(default_factory=dict)

    def behind(self, checkpoint_id: int, parallelism: int) -> frozenset[int]:
        """Subtasks that must process epoch ``checkpoint_id`` (the others are already past it)."""
        base = self.checkpoint_id or 0
        return frozenset(i for i in range(parallelism) if self.heads.get(i, base) < checkpoint_id)

    @property
    def partial(self) -> bool:
        """Some subtasks are past ``checkpoint_id`` (a partial recovery)."""
        return any(h != self.checkpoint_id for h in self.heads.values())

    @property
    def state(self) -> DataFrame:
        """The state of a job's first stateful operator."""
        return next(iter(self.states.values()))


def watermark(acks: list, operator: str) -> int | None:
    """A window operator's watermark in a checkpoint: the highest its subtasks acked."""
    return max((a.watermark for a in acks if a.operator == operator and a.watermark is not None), default=None)


class StateRestorer:
    def __init__(self, spark: SparkSession, store: CheckpointStore, job: JobDefinition, flow: Dataflow,
                 max_parallelism: int) -> None:
        self.spark, self.store, self.job, self.flow = spark, store, job, flow
        self.max_parallelism = max_parallelism

    def restore(self, checkpoint_id: int | None, heads: dict[int, int] | None = None,
                skip: set[str] = frozenset()) -> Restored:
        """State at ``checkpoint_id``, checked file by file.

        Every subtask that acked the checkpoint is read, whatever the parallelism it was taken at:
        each operator's state is one DataFrame, and each key's subtask is computed by the run's
        key-group rule. ``heads`` (partial recovery, same parallelism, one stateful operator only):
        subtasks whose state is at a later, pending checkpoint they acked before the failure. ``skip``:
        operators whose state is not read (None in ``states``; local stores hold it)."""
        job = self.job
        if checkpoint_id is None:
            states = {st.operator: self.flow.empty_state(self.spark, st.operator) for st in job.states}
            return Restored(None, states, {op: [] for op in states}, dict.fromkeys(states, 0), {},
                            *self.restore_back_edge_log(None))
        if heads and self.flow.is_iterative:
            log("  the job has a loop: every task of it is upstream of every other, so all of them restart")
            heads = None
        if heads and any(spec.kind is OperatorKind.INTERVAL_JOIN for spec in job.states):
            log("  an interval join's watermark is read from all of its subtasks' state at one checkpoint: all "
                "of them restart")
            heads = None
        if heads and len(job.states) > 1:
            log("  the job has several stateful operators, each upstream of the next: all of them restart")
            heads = None
        taken_at = rescale.taken_at(self.store, job.name, checkpoint_id, job.state_operator)
        if taken_at != job.parallelism:
            log(f"  checkpoint {checkpoint_id} was taken at parallelism {taken_at}, this run is at "
                f"{job.parallelism}: every subtask's state is read and split by key groups "
                f"({self.max_parallelism}); every task restarts and the next snapshot is full")
            heads = None
        acks = self.store.acks(job.name, checkpoint_id)
        states, links, lengths = {}, {}, {}
        all_heads: dict[int, int] = {}
        fresh = self.fresh(checkpoint_id)
        for spec in job.states:
            if spec.operator in fresh:  # new since the checkpoint, or its state no longer reads: built anew
                log(f"  {spec.operator}: not in checkpoint {checkpoint_id}'s version of the job as it is now: "
                    f"its state starts empty")
                states[spec.operator] = None if spec.operator in skip else self.flow.empty_state(self.spark,
                                                                                                  spec.operator)
                links[spec.operator], lengths[spec.operator] = [], 0
                continue
            acked = sorted({a.subtask for a in acks if a.operator == spec.operator})
            if acked != list(range(taken_at)):
                raise StateIntegrityError(
                    f"checkpoint {checkpoint_id} was taken at parallelism {taken_at}, but the catalog has acks "
                    f"of {spec.operator} subtasks {acked}: its state is incomplete; recover from another "
                    f"checkpoint (absreplay recover {job.name} --checkpoint N)")
            op_heads = dict.fromkeys(acked, checkpoint_id) | (heads or {})
            all_heads = op_heads
            links[spec.operator], lengths[spec.operator] = state_chain.chain(self.store, job.name, spec.operator,
                                                                            op_heads)
            if spec.operator in skip:
                states[spec.operator] = None
                continue
            schema = self.flow.state_schema(self.spark, spec.operator)
            states[spec.operator] = keyed_state.restore(self.spark, schema, spec.key, links[spec.operator],
                                                        job.parallelism, spec.identity)
        # windows' watermarks, and event-time TTLs' (``spark_jobs.operators.ttl``)
        watermarks = {spec.operator: watermark(acks, spec.operator) for spec in job.states
                      if spec.kind is OperatorKind.WINDOW or ttl.event_ttl(self.flow.nodes[spec.operator]) is not None}
        return Restored(checkpoint_id, states, links, lengths, all_heads, *self.restore_back_edge_log(checkpoint_id),
                        parallelism=taken_at, watermarks=watermarks)

    def fresh(self, checkpoint_id: int) -> set[str]:
        """The operators whose state a restore of ``checkpoint_id`` into the job as declared now starts empty
        (an upgrade's plan: ``coordinator.upgrades.upgrade``); none when the job is as it was then."""
        found = job_plan.plan(self.store, self.job, checkpoint_id)
        return upgrade.fresh_operators(found) if found.needs_upgrade else set()

    def restore_weak(self, point: int | None, heads: dict[str, int | None], skip: set[str] = frozenset()) -> Restored:
        """A weak-consistency job (``coordinator.checkpoints.weak``): each operator's state at its own
        head, checked file by file as any restore; ``point``: the last epoch the sources read, where
        the run resumes. ``skip``: operators whose local stores hold their head already."""
        job = self.job
        states, links, lengths, watermarks, taken = {}, {}, {}, {}, set()
        for spec in job.states:
            op, head = spec.operator, heads.get(spec.operator)
            if head is None:
                states[op], links[op], lengths[op] = self.flow.empty_state(self.spark, op), [], 0
                continue
            taken_at = rescale.taken_at(self.store, job.name, head, op)
            taken.add(taken_at)
            links[op], lengths[op] = state_chain.chain(self.store, job.name, op, dict.fromkeys(range(taken_at), head))
            states[op] = None if op in skip else keyed_state.restore(
                self.spark, self.flow.state_schema(self.spark, op), spec.key, links[op], job.parallelism,
                spec.identity)
            if spec.kind is OperatorKind.WINDOW:
                watermarks[op] = watermark(self.store.acks(job.name, head), op)
        # one parallelism for all: the base of their next snapshots; else (None) those are full
        return Restored(point, states, links, lengths, {}, parallelism=taken.pop() if len(taken) == 1 else None,
                        watermarks=watermarks)

    def restore_back_edge_log(self, checkpoint_id: int | None) -> tuple[DataFrame | None, int]:
        """Back-edge log ``checkpoint_id`` of a job with a loop, checked against the catalog, and its
        record count; (None, 0) for an acyclic job. It is the loop head's first input on resume."""
        if not self.flow.is_iterative:
            return None, 0
        if checkpoint_id is None:
            return back_edge_log.empty(self.spark, self.flow), 0
        return back_edge_log.restore(self.spark, self.store, self.job, self.flow, checkpoint_id)
