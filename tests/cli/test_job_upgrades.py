"""`absreplay upgrade` of the README's clicks job, one change class a test, each upgrade killed in its middle
and run again, then judged against a reference counted from the input in plain Python: ``tests/clicks_data``
(also the suite's judge, ``tests/sink_check``), or the test's own for a changed filter, whose sinks hold two
versions' output by design."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import text

from tests import clicks_data
from tests.catalog.test_job_versions import clicks
from tests.helpers import cli, cli_ok, crash, kill_when, make_workspace, start
from tests.sink_check import marks_of
from absreplay_examples.clicks_versions import PAGES, job_file


class Clicks:
    """The clicks job as its user edits it: each version in a folder of its own, since a process finds a
    folder's jobs once (``coordinator.dataflow.discovery``); segments of six clicks, over three users and two pages."""

    def __init__(self, tmp_path: Path, sqlite_url: str) -> None:
        self.tmp_path = tmp_path
        self.ws = make_workspace(tmp_path, sqlite_url, clicks())
        self.env: dict[str, str] = {}
        self.versions = 0
        (self.ws.input_dir / "p0").mkdir(parents=True)

    def declare(self, **parts: str) -> None:
        self.versions += 1
        jobs = self.tmp_path / f"jobs-{self.versions}"
        jobs.mkdir()
        (jobs / "clicks.py").write_text(job_file(**parts))
        self.env["ABS_JOBS_DIR"] = str(jobs)

    def land(self, n: int) -> None:
        (self.ws.input_dir / "p0" / f"seg-{n}.jsonl").write_text("".join(
            f'{{"user": "u{i % 3}", "page": "p{i % 2}", "ts": {n * 100 + i}}}\n' for i in range(6)))

    def cli(self, *args: str, spark=None):
        return cli(self.ws, *args, spark=spark, env=self.env)

    def ok(self, *args: str, spark=None) -> str:
        return cli_ok(self.ws, *args, spark=spark, env=self.env)

    def table(self, sql: str) -> dict:
        with self.ws.store.engine.connect() as c:
            return {row[0]: tuple(row[1:]) if len(row) > 2 else row[1] for row in c.execute(text(sql))}

    def judged(self) -> None:
        """Every sink exact at its marks, by ``tests/clicks_data``."""
        found = clicks_data.check(self.ws, marks_of)
        assert found and all(v == (0, 0) for v in found.values()), found

    def upgrades(self) -> list[dict]:
        return [r for r in json.loads(self.ok("recoveries", "clicks", "--json")) if r["kind"] == "upgrade"]


@pytest.fixture
def job(tmp_path, sqlite_url) -> Clicks:
    found = Clicks(tmp_path, sqlite_url)
    found.declare()
    return found


def ran(job: Clicks, spark, epochs: range) -> None:
    for n in epochs:
        job.land(n)
        job.ok("run", "clicks", spark=spark)


def test_a_new_column_killed_after_the_reset_resumes_and_restates(job, spark) -> None:
    ran(job, spark, range(3))
    job.declare(last=', last=abs.max("ts")')
    job.land(3)
    job.ok("inject", "clicks")  # a barrier before the change is processed: its epoch is upgraded too
    crash(job.ws, spark, "recovery.after_reset", "upgrade", "clicks", env=job.env)
    # the reset is done and recorded: a run of the changed job now carries the upgrade on, nothing to refuse
    assert job.ok("plan", "clicks").count("no checkpoint has completed yet") == 1
    [row] = job.upgrades()
    assert row["result"] in ("RUNNING", "FAILED")  # killed, or raised: its reset made either way
    out = job.ok("upgrade", "clicks", spark=spark)
    assert "carrying on upgrade #" in out
    assert job.table("SELECT user, clicks, last FROM clicks_per_user") == {
        "u0": (8, 303), "u1": (8, 304), "u2": (8, 305)}
    job.judged()
    assert job.upgrades()[-1]["result"] == "SUCCEEDED"
    with job.ws.store.engine.connect() as c:
        replayed_from, parts = c.execute(text("SELECT replayed_from, parts FROM upgrades")).one()
    assert replayed_from == 0 and {p["name"]: p["change"] for p in json.loads(parts)}["per_user"] == \
        "changed compatibly"


@pytest.mark.heavy(seconds=60)
def test_a_new_operator_and_sink_under_a_sigkill_backfill_exactly(job, spark) -> None:
    ran(job, spark, range(3))
    job.declare(pages=PAGES)
    # a real SIGKILL of the upgrade's own Spark application, once a replayed epoch is done
    out = kill_when(start(job.ws, "upgrade", "clicks", env=job.env), "] epoch 5:")
    assert "upgrade from the start of the sources" in out
    job.land(3)
    out = job.ok("upgrade", "clicks", spark=spark)
    assert "carrying on upgrade #" in out
    job.ok("run", "clicks", spark=spark)  # epoch 3, at the usual pace
    assert job.table("SELECT page, clicks FROM clicks_per_page") == {"p0": 12, "p1": 12}
    assert job.table("SELECT user, clicks FROM clicks_per_user") == {"u0": 8, "u1": 8, "u2": 8}
    job.judged()
    assert [r["result"] for r in job.upgrades()] == ["SUCCEEDED"]


@pytest.mark.sink_unchecked("a new operator built from a checkpoint: its sink holds what came after that cut, "
                            "judged by the test")
def test_a_new_operator_from_a_checkpoint_counts_from_its_cut(job, spark) -> None:
    ran(job, spark, range(4))
    job.declare(pages=PAGES)
    out = job.ok("upgrade", "clicks", "--from-checkpoint", "2", spark=spark)
    assert "upgrade from checkpoint 2" in out
    kept = clicks_data.records(job.ws, job.ws.store.cut("clicks", 2))
    later = [r for r in clicks_data.records(job.ws, marks_of(job.ws, "pages")) if r not in kept]
    assert job.table("SELECT page, clicks FROM clicks_per_page") == dict(Counter(r["page"] for r in later)) == {
        "p0": 6, "p1": 6}
    assert job.table("SELECT user, clicks FROM clicks_per_user") == {"u0": 8, "u1": 8, "u2": 8}  # deduplicated


@pytest.mark.sink_unchecked("a changed filter from a checkpoint: totals hold version 1's output up to its cut "
                            "and version 2's after it, judged by the test against both")
def test_a_changed_filter_from_a_checkpoint_replaces_the_sinks_output_after_it(job, spark) -> None:
    ran(job, spark, range(4))
    job.declare(skip="p1")
    planned = job.cli("plan", "clicks")
    assert planned.code == 2
    flat = " ".join(planned.out.replace("│", " ").split())
    assert "operator valid changed incompatibly" in flat and "sink totals changed incompatibly" in flat, flat
    # a choice is needed: where the output is rebuilt from
    refused = job.cli("upgrade", "clicks", spark=spark)
    assert refused.code == 2 and "--from-start" in refused.err and "--from-checkpoint N" in refused.err
    crash(job.ws, spark, "epoch.compute@6", "upgrade", "clicks", "--from-checkpoint", "2", env=job.env)
    job.ok("upgrade", "clicks", spark=spark)
    cut = job.ws.store.cut("clicks", 2)
    marks = marks_of(job.ws, "totals")
    kept = clicks_data.records(job.ws, cut)
    after = [r for r in clicks_data.records(job.ws, marks) if r not in kept and r["page"] != "p1"]
    assert job.table("SELECT user, clicks FROM clicks_per_user") == dict(Counter(r["user"] for r in kept + after))
    assert job.table("SELECT user, clicks FROM clicks_per_user") == {"u0": 6, "u1": 6, "u2": 6}  # not 8: p1 gone
    refusal, crashed = job.upgrades()
    assert refusal["result"] == "REFUSED" and crashed["requested_checkpoint_id"] == 2
    assert crashed["result"] == "SUCCEEDED" and "processed by a later `absreplay upgrade" in crashed["detail"]


def test_an_incompatible_key_change_is_refused_with_the_choices_and_writes_nothing(job, spark) -> None:
    ran(job, spark, range(2))
    before = (job.table("SELECT user, clicks FROM clicks_per_user"),
              [c.checkpoint_id for c in job.ws.store.checkpoints("clicks")])
    job.declare(key='{"user": str, "page": str}')
    planned = job.cli("plan", "clicks")
    assert planned.code == 2
    flat = " ".join(planned.out.replace("│", " ").split())
    assert "operator per_user changed incompatibly" in flat, flat
    assert "sink totals cannot take the new rows" in flat and "give it a new name" in flat, flat
    for args in (("upgrade", "clicks"), ("upgrade", "clicks", "--from-start"), ("run", "clicks")):
        refused = job.cli(*args, spark=spark)
        assert refused.code == 2, refused.out + refused.err
        assert refused.err.strip().count("\n") == 0 and "sink totals" in refused.err, refused.err
        assert "give the sink a new name" in refused.err or "give it a new name" in refused.err, refused.err
    after = (job.table("SELECT user, clicks FROM clicks_per_user"),
             [c.checkpoint_id for c in job.ws.store.checkpoints("clicks")])
    assert after == before
    assert {r["result"] for r in job.upgrades()} == {"REFUSED"}
    with job.ws.store.engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM upgrades")).scalar() == 0

    # the way out the plan names: the sink under a new name; per_user's state is then rebuilt by choice
    job.declare(key='{"user": str, "page": str}', sink="by_user_page", table="clicks_per_user_page")
    refused = job.cli("upgrade", "clicks", spark=spark)
    assert refused.code == 2 and "per_user" in refused.err and "--from-start" in refused.err, refused.err
    # killed in the middle of the replays' sink commit: every replay done, their output half committed
    crash(job.ws, spark, "sink.mid_commit", "upgrade", "clicks", "--from-start", env=job.env)
    assert "carrying on upgrade #" in job.ok("upgrade", "clicks", spark=spark)
    with job.ws.store.engine.connect() as c:
        rows = c.execute(text("SELECT user, page, clicks FROM clicks_per_user_page")).all()
    assert sorted(rows) == [(f"u{i % 3}", f"p{i % 2}", 2) for i in sorted(range(6), key=lambda i: (i % 3, i % 2))]
    assert job.table("SELECT user, clicks FROM clicks_per_user") == before[0]  # removed: it keeps its rows
    assert [r["result"] for r in job.upgrades()][-2:] == ["REFUSED", "SUCCEEDED"]


def test_a_removed_operator_needs_no_upgrade_and_runs_on_through_a_crash(job, spark) -> None:
    job.declare(pages=PAGES)
    ran(job, spark, range(2))
    job.declare()
    assert "removed" in job.ok("plan", "clicks")
    assert "nothing to upgrade" in job.ok("upgrade", "clicks", spark=spark)
    job.land(2)
    job.ok("inject", "clicks")
    crash(job.ws, spark, "epoch.compute@3", "recover", "clicks", env=job.env)
    job.ok("recover", "clicks", spark=spark)
    assert job.table("SELECT user, clicks FROM clicks_per_user") == {"u0": 6, "u1": 6, "u2": 6}
    assert job.table("SELECT page, clicks FROM clicks_per_page") == {"p0": 6, "p1": 6}  # kept, no longer fed


@pytest.mark.sink_unchecked("pages built from checkpoint 1, once the input before it was deleted: judged by the test")
def test_an_upgrade_whose_input_is_gone_is_refused_and_can_start_later(job, spark) -> None:
    ran(job, spark, range(3))
    (job.ws.input_dir / "p0" / "seg-0.jsonl").unlink()  # before checkpoint 1's cut: a run no longer needs it
    job.declare(pages=PAGES)
    refused = job.cli("upgrade", "clicks", spark=spark)
    assert refused.code == 2, refused.out + refused.err
    assert "seg-0.jsonl" in refused.err and "--from-checkpoint N" in refused.err, refused.err
    assert [r["result"] for r in job.upgrades()] == ["REFUSED"]
    assert [str(c.status) for c in job.ws.store.checkpoints("clicks")] == ["COMPLETED"] * 3
    job.ok("upgrade", "clicks", "--from-checkpoint", "1", spark=spark)
    assert job.table("SELECT page, clicks FROM clicks_per_page") == {"p0": 6, "p1": 6}
    assert job.table("SELECT user, clicks FROM clicks_per_user") == {"u0": 6, "u1": 6, "u2": 6}
