"""An epoch whose records are mostly dead letters is no quiet success: ``inject`` says how many of its
records are dead letters and why, a run's line for the epoch says the share, and a job's
``max_dead_letter_share`` fails the inject (exit 1, the barrier registered, nothing lost)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

import absreplay.api as abs
from coordinator.dataflow import discovery as job_discovery
from absreplay.airflow import orchestration
from coordinator.catalog import audit
from coordinator.catalog.db import make_engine
from coordinator.catalog.models import DeadLetter
from coordinator.errors import DeadLetterShareError
from coordinator.settings import Settings
from tests.helpers import cli, cli_ok, make_workspace

JOB_FILE = '''
import absreplay.api as abs


def clicks(name, limit):
    job = abs.Job(name, parallelism=1, max_dead_letter_share=limit)
    (job.source("clicks", abs.json_lines({"user": int, "page": str}))
     .key_by("user", int).aggregate("per_user", n=abs.count())
     .sink("out", abs.SqlTable(f"{name}_per_user")))
    return job


lenient = clicks("clicks", None)
strict = clicks("strict_clicks", 0.5)
'''
GOOD = [{"user": 1, "page": "/a"}, {"user": 2, "page": "/b"}]
MISSING = '"field \'user\' is missing"'
NOT_JSON = "'not a JSON object: Expecting value: line 1 column 1 (char 0)'"


@pytest.fixture
def env(tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A jobs folder holding ``clicks`` (no limit) and ``strict_clicks`` (max_dead_letter_share=0.5)."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "clicks.py").write_text(JOB_FILE)
    monkeypatch.setenv("ABS_JOBS_DIR", str(folder))
    monkeypatch.setattr(job_discovery, "_FOUND", {})
    return {"ABS_DATABASE_URL": sqlite_url, "ABS_HOME": str(tmp_path / "home"), "ABS_JOBS_DIR": str(folder)}


def land(env: dict[str, str], job: str, name: str, bad: int, good: list[dict] = GOOD) -> None:
    """One segment: the first good record, ``bad`` lines without a user (two of them not JSON at all), the rest."""
    lines = [json.dumps(good[0]), *([json.dumps({"page": "/x"})] * (bad - 2)), "oops", "oops",
             *map(json.dumps, good[1:])]
    path = Path(env["ABS_HOME"]) / "data" / job / "input" / "p0" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))


def test_inject_says_the_dead_letters_share_and_first_reasons(env) -> None:
    land(env, "clicks", "seg-0001", bad=8)
    out = cli_ok(None, "inject", "clicks", env=env)
    assert "barrier 1 injected; 1 new segment(s), 10 new record(s)" in out
    assert f"clicks: barrier 1: 8 dead letters (80% of 10 records): {MISSING}, {NOT_JSON}\n" in out
    land(env, "clicks", "seg-0002", bad=2, good=GOOD * 49)  # 2 of 100
    assert "clicks: barrier 2: 2 dead letters (2% of 100 records): " + NOT_JSON in cli_ok(
        None, "inject", "clicks", env=env)
    out = cli_ok(None, "inject", "clicks", env=env)  # nothing new: nothing to say about dead letters
    assert "barrier 3 injected" in out and "dead letter" not in out


def test_beyond_max_dead_letter_share_inject_fails_but_registers_the_barrier(env) -> None:
    land(env, "strict_clicks", "seg-0001", bad=8)
    r = cli(None, "inject", "strict_clicks", env=env)
    assert r.code == 1, r.out + r.err
    assert "barrier 1 injected" in r.out and "8 dead letters (80% of 10 records)" in r.out
    assert r.err.splitlines() == [
        f"error: barrier 1 of job 'strict_clicks': 80% of its 10 new records are dead letters, above "
        f"max_dead_letter_share=0.5 (first reason: {MISSING}); the barrier is registered, its dead letters "
        f"are in the catalog"]
    rows = json.loads(cli_ok(None, "checkpoints", "strict_clicks", "--json", env=env))
    assert [(row["checkpoint_id"], row["status"]) for row in rows] == [(1, "PENDING")]
    with make_engine(env["ABS_DATABASE_URL"]).connect() as c:
        assert c.scalar(select(func.count()).select_from(DeadLetter).where(DeadLetter.checkpoint_id == 1)) == 8
    land(env, "strict_clicks", "seg-0002", bad=5, good=(GOOD * 3)[:5])  # 5 of 10: at the limit, not above it
    assert "5 dead letters (50% of 10 records)" in cli_ok(None, "inject", "strict_clicks", env=env)


def test_the_airflow_barrier_task_fails_without_retry_and_says_the_share(env) -> None:
    settings = Settings.from_env(env)
    land(env, "clicks", "seg-0001", bad=8)
    barrier = orchestration.inject_barrier(settings, "clicks")
    assert (barrier["checkpoint_id"], barrier["dead_letters"], barrier["dead_letter_share"]) == (1, 8, 0.8)
    assert barrier["message"].endswith(f"; 8 dead letters (80% of 10 records): {MISSING}, {NOT_JSON}")
    land(env, "strict_clicks", "seg-0001", bad=8)
    with pytest.raises(DeadLetterShareError) as raised:
        orchestration.inject_barrier(settings, "strict_clicks")
    assert "above max_dead_letter_share=0.5" in str(raised.value)
    assert orchestration.fails_without_retry(raised.value)  # a retry would inject barrier 2 and turn green


@pytest.mark.parametrize("share", [-0.1, 1.5, math.nan])
def test_a_share_outside_0_to_1_is_refused_at_declaration(share: float) -> None:
    with pytest.raises(ValueError, match="max_dead_letter_share must be between 0 and 1"):
        abs.Job("clicks", max_dead_letter_share=share)


def test_the_declared_share_reaches_the_job_definition(env) -> None:
    assert job_discovery.get_job("strict_clicks").max_dead_letter_share == 0.5
    assert job_discovery.get_job("clicks").max_dead_letter_share is None
    assert abs.Job("edge", max_dead_letter_share=0).max_dead_letter_share == 0


def test_first_reasons_are_distinct_in_recorded_order_and_at_most_three(tmp_path, sqlite_url) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    (ws.input_dir / "p0").mkdir(parents=True)
    (ws.input_dir / "p0" / "seg-1.txt").write_text("a\n" * 2000)
    ws.coordinator.inject()
    reasons = ["b", "a", "b", "c", "a", "d", "e"]
    with ws.store.sessions.begin() as s:
        s.add_all(DeadLetter(job="wordcount", checkpoint_id=1, partition="p0", segment="seg-1.txt", offset=i,
                             reason=r, payload="") for i, r in enumerate(reasons))
    dead = audit.epoch_dead_letters(ws.store.engine, "wordcount", [1, 2])
    assert dead[1] == audit.EpochDeadLetters(7, 2000, 7 / 2000, ("b", "a", "c"))
    assert dead[1].summary() == "7 dead letters (0.4% of 2,000 records)"
    assert dead[2] == audit.EpochDeadLetters(0, 0, 0.0, ())  # no such checkpoint: nothing to say
    assert [audit.percent(x) for x in (0, 0.0004, 0.125, 0.9996, 1)] == ["0%", "<0.1%", "12.5%", ">99.9%", "100%"]


@pytest.mark.sink_unchecked("judged here: the two good records, one per user")
def test_the_epoch_line_of_a_run_says_the_dead_letters_share(env, tmp_path, sqlite_url, spark, capsys) -> None:
    ws = make_workspace(tmp_path, sqlite_url, job_discovery.get_job("clicks"), jobs_dir=env["ABS_JOBS_DIR"])
    land(env, "clicks", "seg-0001", bad=8)
    ws.coordinator.inject()
    capsys.readouterr()
    ws.run_epochs(spark)
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if "epoch 1:" in ln]
    assert line.startswith("  [1/1] epoch 1: 2 records from 1 segment(s) in ")
    assert "s; 8 dead letters (80% of 10 records)" in line
    ws.coordinator.finalize()
    with ws.store.engine.connect() as c:
        assert dict(c.execute(text("SELECT user, n FROM clicks_per_user")).all()) == {1: 1, 2: 1}
