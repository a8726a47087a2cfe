"""State TTL: tests/jobs/idle_users.py's aggregate (``ttl_epochs=2``) and process function
(``ttl_epochs=1``) drop the keys no epoch wrote for that many epochs, and another aggregate and process
function (``ttl_ms``) the keys whose newest click is that far behind their watermark. Checked against tests/ttl_data's
plain-Python reference (the TTL applied epoch by epoch along the recorded epoch starts) in the sinks, the
state, the keys dropped per task in the catalog, through `verify`, a rewind whose replays (new checkpoint
ids) drop exactly what the first run dropped, and a SIGKILL mid-epoch recovered by `absreplay recover`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text

from coordinator.dataflow.discovery import get_job
from coordinator.catalog import audit
from tests import ttl_data
from tests.helpers import JOBS_DIR, cli_ok, crash, make_workspace
from tests.sink_check import epoch_cuts

JOBS = str(JOBS_DIR)
pytestmark = [pytest.mark.spark]
CLEAN = {"to_sql": (0, 0), "to_parquet": (0, 0), "streak_sql": (0, 0), "recent_sql": (0, 0), "visits_sql": (0, 0)}


@pytest.fixture
def idle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str):
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    monkeypatch.setenv("IDLE_PARQUET", str(tmp_path / "parquet" / "idle"))
    return make_workspace(tmp_path, sqlite_url, get_job("idle_users"), jobs_dir=JOBS)


def reference(ws, checkpoint_id: int) -> ttl_data.Reference:
    return ttl_data.reference(ws.input_dir, epoch_cuts(ws.store, ws.job.name, checkpoint_id))


def sinks(ws) -> dict[str, dict]:
    return {s.name: ttl_data.sink_rows(s.name, s.target(ws.settings.database_url).read()) for s in ws.job.sinks}


def dropped(ws, checkpoint_id: int) -> tuple[int, ...]:
    """Keys dropped in the checkpoint's epoch, summed over each operator's acks (``ttl_data.OPERATORS``)."""
    acks = ws.store.acks(ws.job.name, checkpoint_id)
    return tuple(sum(a.keys_dropped for a in acks if a.operator == op) for op in ttl_data.OPERATORS)


def state(ws, operator: str, checkpoint_id: int, spark) -> dict:
    rows = json.loads(cli_ok(ws, "state", "idle_users", "--operator", operator, "--checkpoint", str(checkpoint_id),
                             "--format", "json", spark=spark))
    if operator == "streak":
        return {r["user"]: (r["epochs"], r["peak"]) for r in rows}
    if operator in ("recent", "visits"):
        return {r["user"]: r["clicks"] for r in rows}
    return {r["user"]: (r["clicks"], r["total"]) for r in rows}


def states(ws, checkpoint_id: int, spark) -> dict[str, dict]:
    return {op: state(ws, op, checkpoint_id, spark) for op in ttl_data.OPERATORS}


def expected_states(ref: ttl_data.Reference) -> dict[str, dict]:
    return {"per_user": ref.per_user, "streak": ref.streak, "recent": ref.recent, "visits": ref.visits}


def run_six_epochs(ws, spark) -> ttl_data.Reference:
    for batch in range(6):
        ttl_data.land(ws.input_dir, batch)
        ws.coordinator.inject()
    cli_ok(ws, "process", "idle_users", spark=spark)
    cli_ok(ws, "finalize", "idle_users")
    return reference(ws, 6)


@pytest.mark.heavy(seconds=120)
def test_keys_untouched_for_their_ttl_leave_state_and_sinks_are_counted_and_a_rewind_drops_the_same(
        idle, spark) -> None:
    ws = idle
    ref = run_six_epochs(ws, spark)
    assert ttl_data.check(ws) == CLEAN
    got = sinks(ws)
    assert got["to_sql"] == got["to_parquet"] == ref.per_user and got["streak_sql"] == ref.streak
    assert got["recent_sql"] == ref.recent and got["visits_sql"] == ref.visits
    # every TTL mattered: keys were dropped on the way, and some that were seen are gone for good
    assert all(sum(counts) for counts in zip(*ref.dropped, strict=True))
    seen = {c["user"] for c in ttl_data.clicks_between(ws.input_dir, {}, ws.store.cut(ws.job.name, 6))}
    assert all(seen - set(rows) for rows in expected_states(ref).values())
    # the event-time TTL's watermark is acked with its state, as a window's is
    assert {a.watermark for a in ws.store.acks(ws.job.name, 6) if a.operator == "recent"} == {max(
        c["ts"] for c in ttl_data.clicks_between(ws.input_dir, {}, ws.store.cut(ws.job.name, 6)))}
    # keys dropped per task, as the reference counts them per epoch; the operator view sums them
    first = {n: dropped(ws, n) for n in range(1, 7)}
    assert [first[n] for n in range(1, 7)] == ref.dropped
    with ws.store.engine.connect() as c:
        view = dict(c.execute(text("SELECT checkpoint_id, keys_dropped FROM operator_stats "
                                   "WHERE job = 'idle_users' AND operator = 'per_user'")).all())
    assert view == {n: counts[0] for n, counts in first.items()}
    # and the Airflow view's acks of a checkpoint list them per task
    busiest = max(range(1, 7), key=lambda n: first[n][1])
    acks = audit.checkpoint_detail(ws.store.engine, ws.job.name, busiest).acks
    assert sum(a.keys_dropped for a in acks if a.operator == "streak") == first[busiest][1] > 0
    assert states(ws, 6, spark) == expected_states(ref)

    # a rewind to 3: the replays of epochs 4..6 take new checkpoint ids and drop exactly the same keys
    cli_ok(ws, "rewind", "idle_users", "--to", "3", spark=spark)
    cli_ok(ws, "finalize", "idle_users")
    latest = ws.store.latest_completed(ws.job.name).checkpoint_id
    replays = {ws.store.checkpoint(ws.job.name, n).replay_of: n for n in range(7, latest + 1)}
    assert sorted(replays) == [4, 5, 6] and latest == replays[6]
    assert [dropped(ws, replays[n]) for n in (4, 5, 6)] == [first[n] for n in (4, 5, 6)]
    assert reference(ws, latest) == ref
    assert ttl_data.check(ws) == CLEAN and sinks(ws) == got
    assert states(ws, latest, spark) == expected_states(ref)
    assert "verified" in cli_ok(ws, "verify", "idle_users", spark=spark)


@pytest.mark.heavy(seconds=100)
@pytest.mark.timeout(600)
def test_a_crash_mid_epoch_then_recover_drops_what_the_reference_drops(idle, spark, summary) -> None:
    ws = idle
    for batch in range(3):
        ttl_data.land(ws.input_dir, batch)
        ws.coordinator.inject()
    # the process dies computing epoch 2, checkpoint 1 done (and maybe not yet committed)
    crash(ws, spark, "epoch.compute@2", "process", "idle_users")
    for batch in range(3, 5):
        ttl_data.land(ws.input_dir, batch)
        ws.coordinator.inject()
    cli_ok(ws, "recover", "idle_users", spark=spark)
    found = ttl_data.check(ws)
    summary(f"idle_users: a crash mid-epoch, (lost, duplicated) per sink {found}")
    assert found == CLEAN
    latest = ws.store.latest_completed(ws.job.name).checkpoint_id
    ref = reference(ws, latest)
    assert {name: rows for name, rows in sinks(ws).items() if name != "to_parquet"} == {
        "to_sql": ref.per_user, "streak_sql": ref.streak, "recent_sql": ref.recent, "visits_sql": ref.visits}
    assert [dropped(ws, n) for n in range(1, latest + 1)] == ref.dropped
    assert "verified" in cli_ok(ws, "verify", "idle_users", spark=spark)
