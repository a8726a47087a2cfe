"""A lookup join that emits its records again when their row changes (``join(..., reemit=True)``): its
sinks upsert by the click's id and hold every click with its user's current tier. The job
tests/jobs/tiered_clicks.py against tests/reemit_data.py's plain-Python reference after every checkpoint,
in a SQL table and a Parquet directory; `verify`; a rewind that puts each row back as of its checkpoint;
and a crash and a SIGKILL with recoveries."""

from __future__ import annotations

import pytest

import absreplay.api as abs
from coordinator.dataflow.discovery import get_job
from tests import reemit_data
from tests.helpers import JOBS_DIR, cli_ok, crash, crash_then_kill, make_workspace

JOBS = str(JOBS_DIR)
JOB = reemit_data.JOB
pytestmark = pytest.mark.sink_unchecked("judged here against tests/reemit_data.py's plain-Python reference")


@pytest.fixture
def tiered(tmp_path, monkeypatch, sqlite_url):
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    monkeypatch.setenv("TIERED_PARQUET", str(tmp_path / "parquet" / "tiered"))
    return make_workspace(tmp_path, sqlite_url, get_job(JOB), jobs_dir=JOBS)


def expected_at(ws, checkpoint_id: int) -> dict[str, tuple[str, str, str]]:
    return reemit_data.reference(ws.input_dir, ws.store.cut(JOB, checkpoint_id))


def sinks(ws) -> dict[str, dict]:
    return {s.name: reemit_data.sink_rows(s.target(ws.settings.database_url).read()) for s in ws.job.sinks}


def _job(name: str) -> tuple[abs.Job, abs.Stream]:
    job = abs.Job(name, parallelism=1)
    clicks = job.source("clicks", abs.json_lines({"id": str, "user": str}))
    tiers = job.source("tiers", abs.csv({"user": str, "tier": str}))
    return job, clicks.key_by("user", str).join("j", tiers.key_by("user", str), reemit=True)


def test_a_reemitting_join_goes_to_sinks_keyed_by_what_identifies_a_record() -> None:
    columns = {"id": str, "user": str, "tier": str}
    job, joined = _job("reemit_unit")
    joined.sink("out", abs.SqlTable("reemit_unit"), columns=columns, key="id")
    out = job.definition().sinks[0]
    assert out.key == ("id",) and not out.from_state
    job, joined = _job("reemit_no_key")
    joined.sink("out", abs.SqlTable("reemit_no_key"), columns=columns)
    with pytest.raises(ValueError, match=r"name the columns that identify a record, e.g. key=\('id',\)"):
        job.definition()
    job, joined = _job("reemit_counted")
    joined.key_by("tier", str).aggregate("per_tier", n=abs.count()).sink("out", abs.SqlTable("reemit_counted"))
    with pytest.raises(ValueError, match="'per_tier' reads the re-emitting join 'j'.*only sinks may read it"):
        job.definition()
    plain = abs.Job("plain_key", parallelism=1)
    (plain.source("clicks", abs.json_lines({"id": str, "user": str})).key_by("user", str)
        .aggregate("n", n=abs.count()).sink("out", abs.SqlTable("plain_key"), key="user"))
    with pytest.raises(ValueError, match="key= is for the sinks of a re-emitting join.*upserts by its own key"):
        plain.definition()
    with pytest.raises(ValueError, match="reemit='yes' must be True or False"):
        job.source("more", abs.csv({"user": str})).key_by("user", str).join(
            "k", job.source("other", abs.csv({"user": str})).key_by("user", str), reemit="yes")


def test_rows_follow_their_users_tier_verify_and_a_rewind_puts_each_row_back(tiered, spark) -> None:
    ws = tiered
    views = []
    for batch in range(5):
        n = ws.epoch(spark, lambda d: reemit_data.land(d, batch))
        expected = expected_at(ws, n)
        assert sinks(ws) == {"to_sql": expected, "to_parquet": expected}, f"checkpoint {n}"
        views.append(expected)
    # the data has what the test is about: clicks emitted again with a new tier, and clicks that waited
    changed = {i for before, after in zip(views, views[1:], strict=False) for i in before if before[i] != after[i]}
    waited = {i for i, (user, _, _) in views[1].items() if user == "u7" and i.startswith("b0-")}
    assert len(changed) >= 10 and waited
    assert "checkpoint 5 verified" in cli_ok(ws, "verify", JOB, spark=spark)

    # a rewind to checkpoint 3 (the oldest retained) reverts both sinks first: later clicks go, the others
    # get their tier of checkpoint 3 back ...
    crash(ws, spark, "recovery.after_reset", "rewind", JOB, "--to", "3")
    assert sinks(ws) == {"to_sql": views[2], "to_parquet": views[2]}
    assert any(views[2][i] != views[4][i] for i in views[2])
    # ... and the replayed epochs bring the latest rows again
    cli_ok(ws, "recover", JOB, spark=spark)
    ws.coordinator.finalize()
    assert sinks(ws) == {"to_sql": views[4], "to_parquet": views[4]}
    latest = ws.store.latest_completed(JOB).checkpoint_id
    assert f"checkpoint {latest} verified" in cli_ok(ws, "verify", JOB, spark=spark)


@pytest.mark.heavy(seconds=80)
@pytest.mark.timeout(600)
def test_reemitted_rows_are_exact_under_a_crash_a_sigkill_and_recovery(tiered, spark, summary) -> None:
    ws = tiered
    crash_then_kill(ws, JOB, reemit_data.land, spark)
    cli_ok(ws, "recover", JOB, spark=spark)  # the recovery on the test's session: no third JVM
    latest = ws.store.latest_completed(JOB).checkpoint_id
    assert latest == 5
    expected = expected_at(ws, latest)
    found = sinks(ws)
    summary(f"tiered_clicks: a crash and a SIGKILL, {len(expected)} clicks with their latest tier: sinks equal the "
            f"reference: {[name for name, rows in found.items() if rows == expected]}")
    assert found == {"to_sql": expected, "to_parquet": expected}
    assert "checkpoint 5 verified" in cli_ok(ws, "verify", JOB, spark=spark)
