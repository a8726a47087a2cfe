"""Session windows (``abs.Session``, spark_jobs/operators/session_windows.py): the merge of sessions a record
bridges, lateness against emitted sessions, and the job tests/jobs/click_sessions.py exactly once under a
crash at a fault point and a SIGKILL with recoveries, against tests/sessions_data.py's plain-Python
reference, then `verify`, `state` and `diff`."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

import absreplay.api as abs
from coordinator.dataflow.discovery import get_job
from coordinator.dataflow.compile import SESSION_EMITTED, output_schema
from coordinator.catalog.models import DeadLetter
from spark_jobs.operators import session_windows
from spark_jobs.operators.keyed_operators import LATE_COLUMNS
from spark_jobs.records.spark_types import spark_schema
from tests import sessions_data
from tests.helpers import JOBS_DIR, cli, cli_ok, make_workspace, crash_then_kill

JOBS = str(JOBS_DIR)
GAP, DELAY = 50_000, 100_000


def _job() -> abs.Job:
    job = abs.Job("sessions_unit", parallelism=1)
    (job.source("clicks", abs.json_lines({"user": str, "ts": int, "ms": int}, time="ts"))
        .key_by("user", str)
        .window("sessions", abs.Session(gap_ms=GAP), time="ts", delay_ms=DELAY, clicks=abs.count(),
                ms=abs.sum("ms"), avg=abs.mean("ms"))
        .sink("out", abs.SqlTable("sessions_unit")))
    return job


def test_a_session_is_declared_with_a_positive_gap_and_keeps_its_emitted_flag_hidden() -> None:
    for gap in (0, -5, 1.5, True):
        with pytest.raises(ValueError, match="positive number of milliseconds"):
            abs.Session(gap_ms=gap)
    job = _job()
    spec = job.definition().state("sessions")
    assert [c for c, _ in spec.columns] == ["user", "window_start", "window_end", "clicks", "ms", "avg__sum",
                                            "avg__count", "avg", SESSION_EMITTED, "updated"]
    assert spec.identity == ("user", "window_start")
    assert [c for c, _ in output_schema(job.node("sessions"))] == ["user", "window_start", "window_end",
                                                                   "clicks", "ms", "avg"]


def test_a_bridging_record_merges_two_sessions_and_records_of_emitted_sessions_are_late(spark) -> None:
    job = _job()
    node = job.node("sessions")
    columns = [c for c, _ in job.definition().state("sessions").columns]
    state = spark.createDataFrame([], spark_schema(job.definition().state("sessions").columns))
    mark = None
    n = 0

    def epoch(clicks: list[tuple[str, int, int]]):
        nonlocal state, mark, n
        n += 1
        rows = spark.createDataFrame([(u, t, ms, "p0", i) for i, (u, t, ms) in enumerate(clicks)],
                                     "user string, ts long, ms long, _partition string, _seq long")
        state, out, late, mark = session_windows.session(state, rows, node, columns, mark, n, False)
        state = state.localCheckpoint(eager=True)
        return ([tuple(r) for r in out.orderBy("user", "window_start").collect()],
                sorted((r["offset"], r["reason"]) for r in late.collect()))

    def sessions() -> list[tuple]:
        return [(r["user"], r["window_start"], r["window_end"], r["clicks"], r["ms"], r[SESSION_EMITTED],
                 r["updated"]) for r in state.orderBy("user", "window_start").collect()]

    planned = session_windows.session(state, spark.createDataFrame([], "user string, ts long, ms long"), node,
                                      columns, None, 1, True)  # a dry run: schemas only
    assert [planned[0].columns, planned[2].columns] == [columns, list(LATE_COLUMNS)]
    # two sessions of u1: [100 s, 150 s) and [160 s, 210 s); the watermark: 160 s - 100 s
    assert epoch([("u1", 100_000, 1), ("u1", 160_000, 2)]) == ([], [])
    assert sessions() == [("u1", 100_000, 150_000, 1, 1, False, 1), ("u1", 160_000, 210_000, 1, 2, False, 1)]
    # 140 s spans [140 s, 190 s): it bridges them, one session of three clicks
    assert epoch([("u1", 140_000, 4)]) == ([], [])
    assert sessions() == [("u1", 100_000, 210_000, 3, 7, False, 2)]
    assert mark == 60_000
    # u2 moves the watermark to 230 s: u1's session is emitted (its end 210 s is at or below), kept flagged
    emitted, late = epoch([("u2", 330_000, 8)])
    assert emitted == [("u1", 100_000, 210_000, 3, 7, 7 / 3)] and late == []
    assert sessions() == [("u1", 100_000, 210_000, 3, 7, True, 3), ("u2", 330_000, 380_000, 1, 8, False, 3)]
    # 205 s would join u1's emitted session: late; 215 s starts a new session after its end; u3 at 170 s: its
    # own span ends at 220 s, behind the watermark: late
    emitted, late = epoch([("u1", 205_000, 16), ("u1", 215_000, 32), ("u3", 170_000, 64)])
    assert emitted == []
    assert [offset for offset, _ in late] == [0, 2]
    assert "event time 205000 is before the end 210000 of a session of its key emitted already" in late[0][1]
    assert "event time 170000: a session of its own would end at 220000" in late[1][1]
    assert "the watermark was 230000 (gap 50000 ms, delay 100000 ms, allowed lateness 0 ms)" in late[1][1]
    assert sessions() == [("u1", 100_000, 210_000, 3, 7, True, 3), ("u1", 215_000, 265_000, 1, 32, False, 4),
                          ("u2", 330_000, 380_000, 1, 8, False, 3)]
    # the watermark at 266 s: u1's new session is emitted; the old one leaves the state (210 s + the gap is
    # at or below it: any record before 210 s is late by its own span now)
    emitted, late = epoch([("u2", 366_000, 1)])
    assert emitted == [("u1", 215_000, 265_000, 1, 32, 32.0)]
    assert sessions() == [("u1", 215_000, 265_000, 1, 32, True, 5), ("u2", 330_000, 416_000, 2, 9, False, 5)]


@pytest.mark.heavy(seconds=70)
@pytest.mark.timeout(600)
def test_sessions_are_exact_under_a_crash_a_sigkill_and_recovery(tmp_path, sqlite_url, spark, monkeypatch, summary) -> None:
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    ws = make_workspace(tmp_path, sqlite_url, get_job(sessions_data.JOB), jobs_dir=JOBS)
    crash_then_kill(ws, sessions_data.JOB, sessions_data.land, spark)
    cli_ok(ws, "recover", sessions_data.JOB, spark=spark)  # the recovery on the test's session: no third JVM

    latest = ws.store.latest_completed(sessions_data.JOB).checkpoint_id
    assert latest == 5
    found = sessions_data.check(ws)
    ref = sessions_data.reference(ws.input_dir, [ws.store.cut(sessions_data.JOB, n) for n in range(1, 6)])
    summary(f"click_sessions: a crash and a SIGKILL, {len(ref.emitted)} sessions, {ref.bridges} bridging clicks, "
            f"{len(ref.late)} late: (lost, duplicated) {found}")
    assert found == {"to_sql": (0, 0), "sessions_late": (0, 0)}
    # the data has what the test is about: merges across epochs, bridges, both kinds of late clicks
    assert len(ref.emitted) > 20 and ref.bridges > 5 and ref.extended > 5
    with ws.store.sessions() as s:
        reasons = s.execute(select(DeadLetter.reason).where(DeadLetter.job == sessions_data.JOB)).scalars().all()
    assert any("before the end" in r for r in reasons) and any("a session of its own" in r for r in reasons)

    r = cli(ws, "verify", sessions_data.JOB, spark=spark)
    assert r.code == 0, r.out + r.err
    assert "checkpoint 5 verified" in r.out
    state = json.loads(cli_ok(ws, "state", sessions_data.JOB, "--checkpoint", "5", "--operator", "sessions",
                              "--format", "json"))
    assert state and {row[SESSION_EMITTED] for row in state} == {True, False}
    diff = [json.loads(line) for line in cli_ok(ws, "diff", sessions_data.JOB, "--from", "4", "--to", "5",
                                                "--operator", "sessions", "--format", "jsonl").splitlines()]
    emitted = {(u, s) for u, s, *_ in sessions_data.committed(ws.store)}
    flagged = {(r["user"], r["window_start"]) for r in diff if r.get(f"{SESSION_EMITTED}_to") is True
               and r.get(f"{SESSION_EMITTED}_from") is False}
    assert flagged and flagged <= emitted
