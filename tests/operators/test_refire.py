"""Re-firing windows (``window(..., refire=True)``, spark_jobs/operators/refire.py): a window is in its sinks
as soon as the watermark passes its end, and its row is replaced when clicks within the allowed lateness
change it. The job tests/jobs/refired_clicks.py against tests/refire_data.py's plain-Python reference after
every checkpoint, in a SQL table and a Parquet directory; `verify`; a rewind that puts each window's row back
as of its checkpoint; and a crash and a SIGKILL with recoveries."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

import absreplay.api as abs
from coordinator.dataflow.discovery import get_job
from coordinator.dataflow.compile import WINDOW_EMITTED
from coordinator.catalog.models import DeadLetter
from tests import refire_data
from tests.helpers import JOBS_DIR, cli_ok, crash, crash_then_kill, make_workspace
from tests.sink_check import epoch_cuts

JOBS = str(JOBS_DIR)
pytestmark = pytest.mark.sink_unchecked("judged here against tests/refire_data.py's plain-Python reference")


@pytest.fixture
def clicks(tmp_path, monkeypatch, sqlite_url):
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    monkeypatch.setenv("REFIRED_PARQUET", str(tmp_path / "parquet" / "refired"))
    return make_workspace(tmp_path, sqlite_url, get_job(refire_data.JOB), jobs_dir=JOBS)


def expected_at(ws, checkpoint_id: int):
    return refire_data.reference(ws.input_dir, epoch_cuts(ws.store, refire_data.JOB, checkpoint_id))


def sinks(ws) -> dict[str, dict]:
    return {s.name: refire_data.sink_rows(s.target(ws.settings.database_url).read()) for s in ws.job.sinks
            if s.name != f"{refire_data.OPERATOR}_late"}


def late_clicks(ws) -> list[str]:
    with ws.store.sessions() as s:
        return sorted(json.loads(p)["id"] for p in s.execute(select(DeadLetter.payload).where(
            DeadLetter.job == refire_data.JOB, DeadLetter.segment == refire_data.OPERATOR)).scalars())


def test_refire_is_declared_for_tumbling_and_sliding_windows_and_its_sinks_upsert_by_window() -> None:
    declared = abs.Job("refire_unit", parallelism=1)
    keyed = declared.source("clicks", abs.json_lines({"user": str, "ts": int}, time="ts")).key_by("user", str)
    with pytest.raises(ValueError, match="refire is for Tumbling and Sliding"):
        keyed.window("s", abs.Session(gap_ms=5), time="ts", refire=True, n=abs.count())
    with pytest.raises(ValueError, match="must be True or False"):
        keyed.window("w", abs.Tumbling(ms=10), time="ts", refire="yes", n=abs.count())
    keyed.window("w", abs.Sliding(size_ms=20, slide_ms=10), time="ts", refire=True, n=abs.count()).sink(
        "out", abs.SqlTable("refire_unit"))
    definition = declared.definition()
    assert [c for c, _ in definition.state("w").columns][-2:] == [WINDOW_EMITTED, "updated"]
    out = next(s for s in definition.sinks if s.name == "out")
    assert out.key == ("user", "window_start") and not out.from_state
    assert [c for c, _ in out.columns] == ["user", "window_start", "window_end", "n"]  # the stamp is not emitted
    bad = abs.Job("refire_bad", parallelism=1)
    (bad.source("clicks", abs.json_lines({"user": str, "ts": int}, time="ts")).key_by("user", str)
        .window("w", abs.Tumbling(ms=10), time="ts", refire=True, n=abs.count())
        .sink("out", abs.SqlTable("refire_bad"), columns=("user", "n")))
    with pytest.raises(ValueError, match="columns must start with the key 'user', 'window_start'"):
        bad.definition()


def test_windows_refire_in_their_sinks_verify_and_a_rewind_puts_each_row_back(clicks, spark) -> None:
    ws = clicks
    views = []
    for batch in range(5):
        n = ws.epoch(spark, lambda d: refire_data.land(d, batch))
        expected, late = expected_at(ws, n)
        got = sinks(ws)
        for name, rows in got.items():
            assert rows == expected, (n, name, {k: (rows.get(k), expected.get(k)) for k in {*rows, *expected}
                                                if rows.get(k) != expected.get(k)})
        assert late_clicks(ws) == sorted(late)
        views.append(expected)
    # the data has what the test is about: windows emitted, then changed by clicks within the lateness
    refired = {k for before, after in zip(views, views[1:], strict=False) for k in before if before[k] != after[k]}
    assert len(refired) >= 5 and len(late_clicks(ws)) >= 3
    assert "checkpoint 5 verified" in cli_ok(ws, "verify", refire_data.JOB, spark=spark)

    # a rewind to checkpoint 3 (the oldest retained) reverts both sinks first: windows emitted since go,
    # windows re-fired since get their row of checkpoint 3 back ...
    crash(ws, spark, "recovery.after_reset", "rewind", refire_data.JOB, "--to", "3")
    assert sinks(ws) == {"to_sql": views[2], "to_parquet": views[2]}
    assert any(views[2][k] != views[4][k] for k in views[2]) and set(views[4]) - set(views[2])
    # ... and the replayed epochs bring the same rows again
    cli_ok(ws, "recover", refire_data.JOB, spark=spark)
    ws.coordinator.finalize()
    latest = ws.store.latest_completed(refire_data.JOB).checkpoint_id
    assert sinks(ws) == {"to_sql": views[4], "to_parquet": views[4]} == {
        "to_sql": expected_at(ws, latest)[0], "to_parquet": expected_at(ws, latest)[0]}
    assert f"checkpoint {latest} verified" in cli_ok(ws, "verify", refire_data.JOB, spark=spark)


@pytest.mark.heavy(seconds=70)
@pytest.mark.timeout(600)
def test_refired_windows_are_exact_under_a_crash_a_sigkill_and_recovery(clicks, spark, summary) -> None:
    ws = clicks
    crash_then_kill(ws, refire_data.JOB, refire_data.land, spark)
    cli_ok(ws, "recover", refire_data.JOB, spark=spark)  # the recovery on the test's session: no third JVM
    latest = ws.store.latest_completed(refire_data.JOB).checkpoint_id
    assert latest == 5
    expected, late = expected_at(ws, latest)
    found = sinks(ws)
    summary(f"refired_clicks: a crash and a SIGKILL, {len(expected)} windows, {len(late)} late clicks: sinks equal the "
            f"reference: {[name for name, rows in found.items() if rows == expected]}")
    assert found == {"to_sql": expected, "to_parquet": expected}
    assert late_clicks(ws) == sorted(late)
    assert "checkpoint 5 verified" in cli_ok(ws, "verify", refire_data.JOB, spark=spark)
