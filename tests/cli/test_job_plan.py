"""`absreplay plan` as a user meets it: the README's clicks job runs, its file changes, and the plan says what
changed and what an upgrade does; `run`, `process` and `recover` of the changed job stop with that plan before
Spark starts, nothing written. A removed operator needs no upgrade: the job runs on."""

from __future__ import annotations

import json

from sqlalchemy import text

from tests.helpers import cli, cli_ok, make_workspace
from tests.catalog.test_job_versions import clicks

FILE = """import absreplay.api as abs

job = abs.Job("clicks", parallelism=2)
clicks = job.source("clicks", abs.json_lines({{"user": str, "page": str, "ts": int}}, time="ts"))
clicks.key_by("user", str).aggregate("per_user", clicks=abs.count(){last}).sink(
    "totals", abs.SqlTable("clicks_per_user"))
{pages}"""
PAGES = """clicks.key_by("page", str).aggregate("per_page", clicks=abs.count()).sink(
    "pages", abs.SqlTable("clicks_per_page"))
"""


def test_plan_names_each_change_and_a_changed_job_stops_before_spark(tmp_path, sqlite_url, spark) -> None:
    ws = make_workspace(tmp_path, sqlite_url, clicks(per_page=True))

    def declare(version: int, **parts: str) -> None:
        """The job file as the user edits it: each edit in a folder of its own, since a process finds a
        folder's jobs once (``coordinator.dataflow.discovery``)."""
        jobs = tmp_path / f"jobs-{version}"
        jobs.mkdir()
        (jobs / "clicks.py").write_text(FILE.format(**parts))
        env["ABS_JOBS_DIR"] = str(jobs)

    env: dict[str, str] = {}
    declare(1, last="", pages=PAGES)
    part = ws.input_dir / "p0"
    part.mkdir(parents=True)

    def land(n: int) -> None:
        (part / f"seg-{n}.jsonl").write_text("".join(
            f'{{"user": "u{i % 3}", "page": "p{i % 2}", "ts": {n * 100 + i}}}\n' for i in range(6)))

    def totals() -> dict[str, int]:
        with ws.store.engine.connect() as c:
            return dict(c.execute(text("SELECT user, clicks FROM clicks_per_user")).all())

    land(0)
    cli_ok(ws, "run", "clicks", spark=spark, env=env)
    out = cli_ok(ws, "plan", "clicks", env=env)
    assert "the next run goes ahead from checkpoint 1" in out

    # the operator per_page and its sink removed: nothing to build, the job runs on
    declare(2, last="", pages="")
    out = cli_ok(ws, "plan", "clicks", env=env)
    assert "per_page" in out and "removed" in out and "the next run goes ahead from checkpoint 1" in out
    land(1)
    cli_ok(ws, "run", "clicks", spark=spark, env=env)
    assert totals() == {"u0": 4, "u1": 4, "u2": 4}

    # a column more, and per_page back: new, built from the input
    declare(3, last=', last=abs.max("ts")', pages=PAGES)
    planned = cli(ws, "plan", "clicks", env=env)
    assert planned.code == 2, planned.out + planned.err
    flat = " ".join(planned.out.split())
    for row in ("operator per_user changed compatibly new column last:long",
                "operator per_page new state built from the input",
                "sink totals changed compatibly new column last:long its rows restated with the new columns",
                "sink pages new gets the backfilled output"):
        assert row in " ".join(planned.out.replace("│", " ").split()), planned.out
    assert "`absreplay upgrade clicks` carries the state over" in flat
    as_json = json.loads(cli(ws, "plan", "clicks", "--json", env=env).out)
    assert as_json["needs_upgrade"] and as_json["checkpoint_id"] == 2
    assert {p["name"]: p["change"] for p in as_json["parts"]} == {
        "clicks": "unchanged", "per_user": "changed compatibly", "per_page": "new", "totals": "changed compatibly",
        "pages": "new"}

    land(2)
    before = [c.checkpoint_id for c in ws.store.checkpoints("clicks")]
    for args in (("run", "clicks"), ("recover", "clicks")):
        stopped = cli(ws, *args, spark=spark, env=env)
        assert stopped.code == 2, stopped.out + stopped.err
        assert stopped.err.strip().splitlines() == [stopped.err.strip()]
        assert stopped.err.startswith("error: job 'clicks' changed since checkpoint 2"), stopped.err
        assert "operator per_page new" in stopped.err and "nothing was run" in stopped.err
    assert [c.checkpoint_id for c in ws.store.checkpoints("clicks")] == before  # no barrier, no replay
    assert "plan of clicks" in cli(ws, "run", "clicks", spark=spark, env=env).out  # the plan's table, printed
    assert totals() == {"u0": 4, "u1": 4, "u2": 4}
    refused = json.loads(cli_ok(ws, "recoveries", "clicks", "--json", env=env))
    assert refused[-1]["result"] == "REFUSED" and "changed since checkpoint 2" in refused[-1]["detail"]
    # a barrier is no run: it records the cut, and the application itself stops with the plan too
    cli_ok(ws, "inject", "clicks", env=env)
    stopped = cli(ws, "process", "clicks", spark=spark, env=env)
    assert stopped.code == 2 and "changed since checkpoint 2" in stopped.err

    # the upgrade: per_page built from the start of the input (epoch 2 too, when it was not declared), its sink
    # backfilled, totals restated with its new column; then the job goes on as declared
    upgraded = cli(ws, "upgrade", "clicks", spark=spark, env=env)
    assert upgraded.code == 0, upgraded.out + upgraded.err
    assert "upgrade from the start of the sources" in upgraded.out
    assert totals() == {"u0": 6, "u1": 6, "u2": 6}  # epoch 3 was injected before the upgrade: replayed with it
    with ws.store.engine.connect() as c:
        assert dict(c.execute(text("SELECT page, clicks FROM clicks_per_page")).all()) == {"p0": 9, "p1": 9}
        assert dict(c.execute(text("SELECT user, last FROM clicks_per_user")).all()) == {
            "u0": 203, "u1": 204, "u2": 205}
    assert cli_ok(ws, "plan", "clicks", env=env).count("the next run goes ahead") == 1
    land(3)
    cli_ok(ws, "run", "clicks", spark=spark, env=env)
    assert totals() == {"u0": 8, "u1": 8, "u2": 8}
    with ws.store.engine.connect() as c:
        assert dict(c.execute(text("SELECT user, last FROM clicks_per_user")).all()) == {
            "u0": 303, "u1": 304, "u2": 305}
    upgrades = cli_ok(ws, "recoveries", "clicks", "--json", env=env)
    assert json.loads(upgrades)[-1]["kind"] == "upgrade" and json.loads(upgrades)[-1]["result"] == "SUCCEEDED"
