"""The checkpoint lifecycle as a hypothesis state machine, run against the real store.

Rules trigger, ack (new and duplicate), decline, time out, stage sinks and
finalize; invariants: ids strictly increase; a checkpoint is COMPLETED only
after every task acked; a duplicate ack changes nothing; a failed checkpoint
never commits its sink transaction; restore uses the latest completed one.
"""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sqlalchemy import select

from coordinator.sinks import transactions as sinks
from coordinator.catalog.db import make_engine
from coordinator.catalog.models import SinkTransaction, TaskAck, utcnow
from coordinator.dataflow.graph import Edge, JobGraph, Operator, OperatorKind, Partitioning
from absreplay_examples.definitions import wordcount
from coordinator.dataflow.jobs import JobDefinition

WORDCOUNT = wordcount()
from coordinator.checkpoints.lifecycle import AckResult, CheckpointStatus, FailureReason, SinkTxnStatus
from coordinator.checkpoints.policy import CheckpointPolicy
from coordinator.checkpoints.store import CheckpointStore
from coordinator.checkpoints.state_handle import StateHandle

GRAPH = JobGraph(
    operators=(
        Operator("source", OperatorKind.SOURCE, 1),
        Operator("count", OperatorKind.AGGREGATE, 2),
        Operator("sink", OperatorKind.SINK, 1),
    ),
    edges=(Edge("source", "count", Partitioning.HASH), Edge("count", "sink", Partitioning.HASH)),
)
TASKS = [(t.operator, t.subtask) for t in GRAPH.to_execution_graph().tasks]
_names = itertools.count()


def no_cut(_session, _cid):
    return {}, 0, 0


class Lifecycle(RuleBasedStateMachine):
    url: str = ""

    def __init__(self) -> None:
        super().__init__()
        # one catalog for the whole test, a fresh job per example: examples stay independent
        self.store = Lifecycle.store_
        self.job = JobDefinition(
            name=f"j{next(_names)}", description="", graph=GRAPH, states=WORDCOUNT.states,
            sinks=WORDCOUNT.sinks, policy=CheckpointPolicy(retained=2),
        )
        self.store.register_job(self.job)
        self.status: dict[int, CheckpointStatus] = {}
        self.acked: dict[int, set[tuple[str, int]]] = {}
        self.staged: set[int] = set()
        self.last_id = 0

    def ids(self) -> list[int]:
        return sorted(self.status)

    @rule()
    def trigger(self) -> None:
        cid = self.store.trigger(self.job.name, no_cut).checkpoint_id
        assert cid is not None and cid > self.last_id, "checkpoint ids must strictly increase"
        self.last_id = cid
        self.status[cid] = CheckpointStatus.PENDING
        self.acked[cid] = set()

    @precondition(lambda self: self.status)
    @rule(data=st.data())
    def ack(self, data) -> None:
        cid = data.draw(st.sampled_from(self.ids()))
        task = data.draw(st.sampled_from(TASKS))
        result = self.store.ack(self.job.name, cid, StateHandle(*task, state_rows=len(self.acked[cid])))
        if task in self.acked[cid]:
            assert result is AckResult.DUPLICATE
        elif self.status[cid] is CheckpointStatus.PENDING:
            assert result is AckResult.SUCCESS
            self.acked[cid].add(task)
            if len(self.acked[cid]) == len(TASKS):
                self.status[cid] = CheckpointStatus.COMPLETED
        else:
            assert result is AckResult.DISCARDED

    @precondition(lambda self: self.status)
    @rule(data=st.data())
    def duplicate_ack_changes_nothing(self, data) -> None:
        acked = [(c, t) for c in self.ids() for t in self.acked[c]]
        if not acked:
            return
        cid, task = data.draw(st.sampled_from(acked))
        before = self.store.acks(self.job.name, cid)
        assert self.store.ack(self.job.name, cid, StateHandle(*task, state_rows=10**6)) is AckResult.DUPLICATE
        after = self.store.acks(self.job.name, cid)
        assert [(a.operator, a.subtask, a.state_rows) for a in before] == [
            (a.operator, a.subtask, a.state_rows) for a in after
        ]

    @rule(cid=st.integers(min_value=1000, max_value=2000))
    def ack_unknown_checkpoint(self, cid: int) -> None:
        assert self.store.ack(self.job.name, cid, StateHandle(*TASKS[0])) is AckResult.UNKNOWN

    @precondition(lambda self: self.status)
    @rule(data=st.data())
    def decline(self, data) -> None:
        cid = data.draw(st.sampled_from(self.ids()))
        changed = self.store.fail(self.job.name, cid, FailureReason.TASK_DECLINED, "declined")
        assert changed == (self.status[cid] is CheckpointStatus.PENDING)
        if changed:
            self.status[cid] = CheckpointStatus.FAILED

    @rule()
    def time_out_everything_pending(self) -> None:
        later = utcnow() + timedelta(milliseconds=self.job.policy.timeout_ms + 1000)
        expired = self.store.expire_timed_out(self.job.name, later)
        pending = [c for c, s in self.status.items() if s is CheckpointStatus.PENDING]
        assert sorted(expired) == pending
        for cid in expired:
            self.status[cid] = CheckpointStatus.FAILED

    @precondition(lambda self: self.status)
    @rule(data=st.data())
    def stage_sink(self, data) -> None:
        cid = data.draw(st.sampled_from(self.ids()))
        if self.status[cid] is not CheckpointStatus.PENDING or cid in self.staged:
            return
        with self.store.sessions.begin() as s:
            sinks.stage(s, self.job.name, "sink", cid, "/nonexistent/staged", None, 0)
        self.staged.add(cid)

    @rule()
    def finalize(self) -> None:
        with self.store.sessions.begin() as s:
            committed, aborted = sinks.settle(s, self.job)
        assert all(self.status[c] is CheckpointStatus.COMPLETED for c in committed)
        assert all(self.status[c] is CheckpointStatus.FAILED for c in aborted)
        for cid in self.store.subsume_beyond_retention(self.job.name):
            assert self.status[cid] is CheckpointStatus.COMPLETED
            self.status[cid] = CheckpointStatus.SUBSUMED

    @invariant()
    def statuses_match_the_model(self) -> None:
        stored = {c.checkpoint_id: CheckpointStatus(c.status) for c in self.store.checkpoints(self.job.name)}
        assert stored == self.status

    @invariant()
    def completed_only_when_every_task_acked(self) -> None:
        with self.store.sessions() as s:
            rows = s.execute(select(TaskAck.checkpoint_id, TaskAck.operator, TaskAck.subtask).where(
                TaskAck.job == self.job.name)).all()
        acked: dict[int, set] = {}
        for cid, op, sub in rows:
            acked.setdefault(cid, set()).add((op, sub))
        for cid, status in self.status.items():
            if status in (CheckpointStatus.COMPLETED, CheckpointStatus.SUBSUMED):
                assert acked.get(cid, set()) == set(TASKS)

    @invariant()
    def failed_never_commits_its_sink(self) -> None:
        with self.store.sessions() as s:
            committed = set(s.scalars(select(SinkTransaction.checkpoint_id).where(
                SinkTransaction.job == self.job.name, SinkTransaction.status == SinkTxnStatus.COMMITTED)))
        assert not any(self.status[c] is CheckpointStatus.FAILED for c in committed)

    @invariant()
    def restore_uses_latest_completed(self) -> None:
        completed = [c for c, s in self.status.items() if s is CheckpointStatus.COMPLETED]
        latest = self.store.latest_completed(self.job.name)
        assert (latest.checkpoint_id if latest else None) == (max(completed) if completed else None)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_lifecycle_rules(backend: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    Lifecycle.store_ = CheckpointStore(make_engine(url))
    machine = Lifecycle.TestCase
    machine.settings = settings(max_examples=40 if backend == "sqlite" else 15, stateful_step_count=25, deadline=None)
    machine().runTest()
