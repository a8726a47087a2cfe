"""A user's job outside the project's packages (tests/jobs/views_by_country.py, found through
ABS_JOBS_DIR): two sources, a filter, a join, an event-time window and two sinks, one a table in
PostgreSQL (another database than the catalog), one a Delta table. Run as a user would, through
`absreplay run`, `verify`, `rewind`, and SIGKILLs at random moments between crashes at fault points; after each,
tests/views_data checks both sinks against the sources in plain Python: nothing lost, nothing twice.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sqlalchemy import text

from coordinator.dataflow.discovery import get_job
from tests import views_data
from tests.helpers import JOBS_DIR, cli_ok, crash, make_workspace
from tests.runs.test_random_kills import run_and_maybe_kill

JOBS = str(JOBS_DIR)
pytestmark = [pytest.mark.spark, pytest.mark.postgres]


@pytest.fixture
def views(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str):
    """A workspace with a SQLite catalog; the job's SQL sink is the PostgreSQL database ``pg_url``."""
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    monkeypatch.setenv("VIEWS_SQL_URL", pg_url)
    monkeypatch.setenv("VIEWS_DELTA", str(tmp_path / "delta" / "views"))
    from coordinator.catalog.db import upgrade

    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    upgrade(catalog)
    return make_workspace(tmp_path, catalog, get_job("views_by_country"), jobs_dir=JOBS)


def sinks_of(ws) -> dict:
    return {s.name: s.target(ws.settings.database_url).read() for s in ws.job.sinks if not s.name.endswith("_late")}


def check(ws) -> dict[str, tuple[int, int]]:
    found = views_data.check(ws.store, ws.job.name, ws.input_dir, sinks_of(ws))
    assert set(found) == {"to_postgres", "to_delta"}
    return found


def windows(ws) -> int:
    return sinks_of(ws)["to_delta"].num_rows


def test_run_verify_and_rewind_through_the_command_line(views, spark, pg_url) -> None:
    ws = views
    listed = {j["name"]: j for j in json.loads(cli_ok(ws, "jobs", "--json"))["jobs"]}
    assert listed["views_by_country"]["origin"].endswith("tests/jobs/views_by_country.py")
    for batch in range(3):
        views_data.land(ws.input_dir, batch)
        cli_ok(ws, "run", "views_by_country", spark=spark)
    assert check(ws) == {"to_postgres": (0, 0), "to_delta": (0, 0)}
    assert windows(ws) > 10
    with ws.store.engine.connect() as c:
        late = c.execute(text("SELECT count(*) FROM dead_letters WHERE segment = 'per_minute'")).scalar()
        operators = dict(c.execute(text(
            "SELECT operator, acked_subtasks FROM operator_stats WHERE checkpoint_id = 3")).all())
        watermark = c.execute(text("SELECT watermark FROM operator_stats WHERE checkpoint_id = 3 "
                                   "AND operator = 'per_minute'")).scalar()
    assert late > 0  # the far-behind views: dead letters, with their reason
    # every operator acked, each with its own state: the audit shows each
    assert operators == dict.fromkeys(["views", "users", "real_pages", "enrich", "per_minute", "to_postgres",
                                       "to_delta", "per_minute_late"], 2)
    assert watermark and watermark > 4 * views_data.MINUTE
    assert "verified" in cli_ok(ws, "verify", "views_by_country", spark=spark)
    # both sinks agree row for row
    pg = views_data.sink_rows(views_data.postgres_rows(pg_url))
    assert sorted(pg) == sorted(views_data.sink_rows(sinks_of(ws)["to_delta"]))

    before = windows(ws)
    cli_ok(ws, "rewind", "views_by_country", "--to", "1", spark=spark)
    assert check(ws) == {"to_postgres": (0, 0), "to_delta": (0, 0)}
    assert windows(ws) == before  # epochs 2 and 3 replayed: the same windows again, once
    # at another parallelism: every operator's state is split anew by key groups
    views_data.land(ws.input_dir, 3)
    cli_ok(ws, "run", "views_by_country", "--parallelism", "3", spark=spark)
    assert check(ws) == {"to_postgres": (0, 0), "to_delta": (0, 0)}
    assert windows(ws) > before
    assert "verified" in cli_ok(ws, "verify", "views_by_country", spark=spark)
    out = cli_ok(ws, "state", "views_by_country", "--checkpoint", "6", "--operator", "enrich", "--format", "json")
    state = json.loads(out)  # one document
    assert {row["_side"] for row in state} <= {"L", "R"} and any(row["_side"] == "R" for row in state)
    # the window's state between two checkpoints: a window that left it was emitted, once, to both sinks
    out = cli_ok(ws, "diff", "views_by_country", "--from", "5", "--to", "6", "--operator", "per_minute",
                 "--format", "jsonl")
    rows = [json.loads(line) for line in out.splitlines()]  # a changed key a line
    left = {(r["country"], r["page"], r["window_start"]) for r in rows if r["change"] == "removed"}
    emitted = {(c, p, w) for c, p, w, _, _ in views_data.sink_rows(sinks_of(ws)["to_delta"])}
    assert left and left <= emitted
    assert all(r["views_to"] >= r["views_from"] for r in rows if r["change"] == "changed")


@pytest.mark.heavy(seconds=170)
@pytest.mark.timeout(1200)
def test_random_sigkills_and_fault_points_lose_and_duplicate_no_window(views, spark, summary) -> None:
    ws = views
    rng = random.Random(20261123)
    faults = ["snapshot.before_ack", "sink.mid_commit", "epoch.compute"]
    kills, typical = 0, None
    for cycle in range(6):
        views_data.land(ws.input_dir, cycle)
        ws.coordinator.inject()
        if cycle % 2:  # a fault point: the run dies there (on the test's session, what a SIGKILL there
            # leaves), the next recovery takes over
            crash(ws, spark, faults[cycle // 2], "recover", "views_by_country")
            continue
        ran = run_and_maybe_kill(ws, ["recover", "views_by_country"], 600 if typical is None
                                 else rng.uniform(0.0, 1.3 * typical))
        if ran is None:
            kills += 1
        else:
            typical = max(ran, 1.0)
    cli_ok(ws, "recover", "views_by_country", spark=spark)
    found = check(ws)
    summary(f"views_by_country: 6 cycles, {kills} SIGKILLs, {len(faults)} crashes at fault points, {windows(ws)} windows: "
            f"(lost, duplicated) per sink {found}")
    assert found == {"to_postgres": (0, 0), "to_delta": (0, 0)}
    assert windows(ws) > 10
