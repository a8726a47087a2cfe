"""The interval join of two streams (``KeyedStream.interval_join``, spark_jobs/operators/interval_join.py):
what matches, once; the watermark of both inputs; the state it drops; left-outer rows with nulls once the
watermark passes; late records as dead letters. The job tests/jobs/clicks_to_buys.py exactly once under a
crash at a fault point and a SIGKILL with recoveries, against tests/joins_data.py's plain-Python reference,
then `verify`, `state` and `diff`."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

import absreplay.api as abs
from coordinator.dataflow.discovery import get_job
from coordinator.catalog.models import DeadLetter, TaskAck
from coordinator.simulator import SnapshotMode, prefix_states, simulate
from spark_jobs.operators import interval_join
from spark_jobs.operators.dataflow import Dataflow
from spark_jobs.operators.keyed_operators import LATE_COLUMNS
from tests import joins_data
from tests.helpers import JOBS_DIR, cli, cli_ok, make_workspace, crash_then_kill
from tests.runs.test_dry_run import jobs_started

JOBS = str(JOBS_DIR)
LOWER, UPPER = 10_000, 20_000  # a buy at tb matches a click at ta when tb - 10 s <= ta <= tb + 20 s
S = 1_000
LEFT = "user string, ts long, page string, _partition string, _seq long"
RIGHT = "user string, ts long, amount long, _partition string, _seq long"


def _job(how: str, delay_ms: int = 0) -> abs.Job:
    job = abs.Job("joins_unit", parallelism=1)
    clicks = job.source("clicks", abs.json_lines({"user": str, "ts": int, "page": str}, time="ts"))
    buys = job.source("buys", abs.json_lines({"user": str, "ts": int, "amount": int}, time="ts"))
    (clicks.key_by("user", str)
        .interval_join("matched", buys.key_by("user", str), time="ts", lower_ms=LOWER, upper_ms=UPPER, how=how,
                       delay_ms=delay_ms)
        .sink("out", abs.SqlTable("joins_unit"), columns={"user": str, "page": str, "amount": int}))
    return job


def test_an_interval_join_is_declared_with_its_bounds_and_a_late_record_sink() -> None:
    for bad in ({"lower_ms": -1}, {"upper_ms": 1.5}, {"how": "outer"}, {"delay_ms": -5}, {"lower_ms": True}):
        args = {"lower_ms": 0, "upper_ms": 0, "how": "inner", "delay_ms": 0, **bad}
        job = abs.Job("bad_bounds")
        a, b = job.source("a"), job.source("b")
        with pytest.raises(ValueError, match="interval join 'j'"):
            a.key_by("line", str).interval_join("j", b.key_by("line", str), time="ts", **args)
    job = abs.Job("other_types")
    a, b = job.source("a"), job.source("b")
    with pytest.raises(ValueError, match="keys differ in type"):
        a.key_by("line", str).interval_join("j", b.key_by("line", int), time="ts", lower_ms=0, upper_ms=0)
    definition = _job("left").definition()
    spec = definition.state("matched")
    assert spec.identity == ("user", "_side", "_partition", "_seq", "_n") and spec.incremental
    assert [s.name for s in definition.sinks] == ["out", "matched_late"]
    assert {e.source for e in definition.graph.edges if e.target == "matched"} == {"clicks", "buys"}


def test_both_inputs_are_aligned_at_the_barrier_in_the_simulator() -> None:
    """The join's graph as the checkpoint lifecycle knows it (two hashed inputs into one operator) under the
    paper's aligned snapshots: each snapshot is the state of exactly the records before its cut, on both inputs."""
    graph = _job("left").definition().graph
    inputs = {"clicks#0": tuple(range(40)), "buys#0": tuple(range(100, 130))}
    cuts = {1: {"clicks#0": 10, "buys#0": 3}, 2: {"clicks#0": 25, "buys#0": 21}, 3: {"clicks#0": 40, "buys#0": 30}}
    for seed in range(5):
        result = simulate(graph, inputs, cuts, SnapshotMode.ALIGNED, seed)
        assert result.terminated
        for n, cut in cuts.items():
            assert result.snapshots[n].task_states == prefix_states(graph, inputs, cut)


def test_the_state_schema_comes_from_planning_alone_and_a_missing_time_column_is_named(spark, monkeypatch) -> None:
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    flow = Dataflow(get_job(joins_data.JOB))
    schemas = {}
    assert jobs_started(spark, "dry-interval-join", lambda: schemas.update(near=flow.state_schema(spark, "near"))) == []
    assert schemas["near"].fieldNames() == ["user", "_side", "_partition", "_seq", "_n", "_ts", "_matched", "id", "ts",
                                            "page", "id_right", "ts_right", "amount", "updated"]
    node = _job("inner").node("matched")
    no_time = spark.createDataFrame([], "user string, at long, page string")
    with pytest.raises(ValueError, match="the left input \\('clicks'\\) has no event-time column 'ts'; it has user"):
        interval_join.epoch(None, no_time, spark.createDataFrame([], RIGHT), node, 1, dry=True)


class Run:
    """One interval join run epoch by epoch on the test's Spark session, as the dataflow runs it."""

    def __init__(self, spark, how: str, delay_ms: int = 0) -> None:
        self.spark, self.node = spark, _job(how, delay_ms).node("matched")
        empty_l, empty_r = spark.createDataFrame([], LEFT), spark.createDataFrame([], RIGHT)
        planned = interval_join.epoch(None, empty_l, empty_r, self.node, 0, dry=True)  # a dry run: schemas only
        assert list(planned[2].columns) == list(LATE_COLUMNS)
        self.state = spark.createDataFrame([], planned[0].schema)
        self.n, self.mark = 0, None

    def epoch(self, clicks: list[tuple], buys: list[tuple]) -> tuple[list[tuple], list[tuple[str, int, str]]]:
        """(joined rows (user, page, ts, amount, ts_right), dead letters (partition, offset, reason))."""
        self.n += 1
        left = self.spark.createDataFrame([(u, t, p, "clicks/p0", i) for i, (u, t, p) in enumerate(clicks)], LEFT)
        right = self.spark.createDataFrame([(u, t, a, "buys/p0", i) for i, (u, t, a) in enumerate(buys)], RIGHT)
        state, joined, late, self.mark = interval_join.epoch(self.state, left, right, self.node, self.n)
        self.state = state.localCheckpoint(eager=True)
        assert joined.columns == ["user", "ts", "page", "ts_right", "amount", "_partition", "_seq"]
        rows = sorted((r["user"], r["page"], r["ts"], r["amount"], r["ts_right"]) for r in joined.collect())
        return rows, sorted((r["partition"], r["offset"], r["reason"]) for r in late.collect())

    def buffered(self) -> list[tuple]:
        return sorted((r["_side"], r["user"], r["_ts"], r["_matched"], r["updated"]) for r in self.state.collect())


@pytest.mark.parametrize("how", ["inner", "left"])
def test_each_pair_once_the_watermark_drops_state_and_a_lonely_left_row_comes_once_with_nulls(spark, how) -> None:
    run = Run(spark, how)
    # u1's click at 100 s and the buy at 95 s: 85 s <= 100 s <= 115 s; the buy at 125 s is too late for it
    # (its window starts at 115 s). u4's click has no buy. The watermark: min(101 s, 125 s)
    joined, late = run.epoch([("u1", 100 * S, "a"), ("u2", 100 * S, "b"), ("u4", 101 * S, "lonely")],
                             [("u1", 95 * S, 5), ("u1", 125 * S, 7)])
    assert joined == [("u1", "a", 100 * S, 5, 95 * S)] and late == []
    assert run.mark == 101 * S
    # a buy matching a buffered click, a click matching a buffered buy: each pair in the epoch of its
    # later row, the pair of epoch 1 not again; below the watermark (101 s): dead letters of either side
    joined, late = run.epoch([("u1", 104 * S, "c"), ("u1", 90 * S, "behind"), ("u5", 109 * S, "later")],
                             [("u2", 105 * S, 9), ("u3", 99 * S, 1)])
    assert joined == [("u1", "c", 104 * S, 5, 95 * S), ("u2", "b", 100 * S, 9, 105 * S)]
    assert [(p, o) for p, o, _ in late] == [("buys/p0", 1), ("clicks/p0", 1)]
    assert ("late for matched: event time 90000 of the left input 'clicks' is below the watermark 101000 (the "
            "older of both inputs' newest event times minus the delay 0 ms)") in late[1][2]
    assert "event time 99000 of the right input 'buys'" in late[0][2]
    assert run.mark == 109 * S  # min(109 s, 125 s)
    # nothing left the state yet: a left row leaves once ta + 10 s < W, a right row once tb + 20 s < W
    assert run.buffered() == [
        ("L", "u1", 100 * S, True, 1), ("L", "u1", 104 * S, True, 2), ("L", "u2", 100 * S, True, 2),
        ("L", "u4", 101 * S, False, 1), ("L", "u5", 109 * S, False, 2),
        ("R", "u1", 95 * S, False, 1), ("R", "u1", 125 * S, False, 1), ("R", "u2", 105 * S, False, 2)]
    # u5's click matches a buy of a later epoch; then the watermark (200 s) drops all but each side's newest
    # row: u4's click never matched: with how="left" it is emitted now, once, with nulls on the right
    joined, late = run.epoch([("u9", 200 * S, "x")], [("u5", 110 * S, 3), ("u9", 240 * S, 4)])
    lonely = [("u4", "lonely", 101 * S, None, None)] if how == "left" else []
    assert joined == sorted([("u5", "later", 109 * S, 3, 110 * S), *lonely]) and late == []
    assert run.mark == 200 * S
    assert run.buffered() == [("L", "u9", 200 * S, False, 3), ("R", "u9", 240 * S, False, 3)]
    # the watermark is read back from the state (a restore has nothing else): min(newest left, newest right)
    assert interval_join.watermark(run.state, 0) == 200 * S
    joined, late = run.epoch([], [])
    assert joined == [] and late == [] and run.mark == 200 * S


def test_the_watermark_waits_for_both_inputs_and_a_record_without_event_time_is_a_dead_letter(spark) -> None:
    run = Run(spark, "left", delay_ms=5 * S)
    joined, late = run.epoch([("u1", 100 * S, "a"), ("u1", None, "no time")], [])
    assert joined == [] and run.mark is None
    assert late == [("clicks/p0", 1, "no event time for matched: column 'ts' of the left input 'clicks' is null")]
    # only the left side has records: no watermark, nothing late, nothing leaves, no row with nulls
    joined, late = run.epoch([("u1", 10 * S, "old")], [])
    assert joined == [] and late == [] and run.mark is None
    # the right side's first record sets it: min(100 s, 300 s) - 5 s; the old click (10 s + 10 s < 95 s) leaves,
    # with nulls; the one at 100 s stays (100 s + 10 s >= 95 s)
    joined, late = run.epoch([], [("u2", 300 * S, 1)])
    assert run.mark == 95 * S and late == []
    assert joined == [("u1", "old", 10 * S, None, None)]
    assert run.buffered() == [("L", "u1", 100 * S, False, 1), ("R", "u2", 300 * S, False, 3)]


def test_rows_of_one_record_made_twice_upstream_keep_apart_in_the_state(spark) -> None:
    """A flat_map before the join may make two rows of one record (same source position): ``_n`` keeps
    them apart, so a restore (newest row per identity) keeps both."""
    run = Run(spark, "inner")
    node = run.node
    left = spark.createDataFrame([("u1", 100 * S, "a", "clicks/p0", 7), ("u1", 100 * S, "b", "clicks/p0", 7)], LEFT)
    right = spark.createDataFrame([("u1", 100 * S, 2, "buys/p0", 0)], RIGHT)
    state, joined, _, _ = interval_join.epoch(run.state, left, right, node, 1)
    assert sorted(r["page"] for r in joined.collect()) == ["a", "b"]
    identity = ["user", "_side", "_partition", "_seq", "_n"]
    assert state.select(*identity).distinct().count() == state.count() == 3


@pytest.mark.heavy(seconds=95)
@pytest.mark.timeout(600)
def test_interval_join_is_exact_under_a_crash_a_sigkill_and_recovery(tmp_path, sqlite_url, spark, monkeypatch,
                                                                      summary) -> None:
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    ws = make_workspace(tmp_path, sqlite_url, get_job(joins_data.JOB), jobs_dir=JOBS)
    crash_then_kill(ws, joins_data.JOB, joins_data.land, spark)
    # the recovery after it, as typed, its Spark application on the test's session (no third JVM to start)
    assert "restoring from checkpoint" in cli_ok(ws, "recover", joins_data.JOB, spark=spark)

    assert ws.store.latest_completed(joins_data.JOB).checkpoint_id == 5
    found = joins_data.check(ws)
    ref = joins_data.reference(ws.input_dir, [ws.store.cut(joins_data.JOB, n) for n in range(1, 6)])
    summary(f"clicks_to_buys: a crash and a SIGKILL, {len(ref.joined)} rows ({ref.unmatched} with nulls, {ref.across} pairs "
            f"across epochs), {len(ref.late)} late: (lost, duplicated) {found}")
    assert found == {"to_sql": (0, 0), f"{joins_data.JOIN}_late": (0, 0)}
    # the data has what the test is about: pairs whose rows came in different epochs, lonely clicks, late
    # records of both sides
    assert ref.across > 10 and ref.unmatched > 5 and len(ref.joined) > 100
    assert {side for side, _ in ref.late} == {"clicks", "buys"}
    with ws.store.sessions() as s:
        reasons = s.execute(select(DeadLetter.reason).where(DeadLetter.job == joins_data.JOB)).scalars().all()
        marks = s.execute(select(TaskAck.watermark).where(
            TaskAck.job == joins_data.JOB, TaskAck.checkpoint_id == 5, TaskAck.operator == joins_data.JOIN)).scalars()
        assert set(marks) == {ref.mark}
    assert reasons and all("is below the watermark" in r for r in reasons)

    r = cli(ws, "verify", joins_data.JOB, spark=spark)
    assert r.code == 0, r.out + r.err
    assert "checkpoint 5 verified" in r.out
    state = json.loads(cli_ok(ws, "state", joins_data.JOB, "--checkpoint", "5", "--operator", joins_data.JOIN,
                              "--format", "json"))
    assert {row["_side"] for row in state} == {"L", "R"}
    assert sorted((row["_side"], row["_partition"], row["_seq"]) for row in state) == sorted(ref.buffered)
    diff = [json.loads(line) for line in cli_ok(ws, "diff", joins_data.JOB, "--from", "4", "--to", "5",
                                                "--operator", joins_data.JOIN, "--format", "jsonl").splitlines()]
    assert {r["change"] for r in diff} >= {"added", "removed"}
    # a partial recovery (subtask 0 past checkpoint 4) would read a watermark mixing two checkpoints: every
    # subtask restarts from 4 instead
    from spark_jobs.run.runner import EpochRunner

    runner = EpochRunner(spark, ws.store, ws.job, ws.settings.data_dir, ws.settings.state_uri)
    restored = runner.restore(4, heads={0: 5})
    assert not restored.partial and restored.behind(5, 2) == {0, 1}
