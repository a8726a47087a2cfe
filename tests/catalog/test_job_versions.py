"""The version of a job's declaration (coordinator.dataflow.versions) and where the catalog keeps it: each
checkpoint records the version the run that took it ran, and ``absreplay checkpoints`` marks where it changed."""

from __future__ import annotations

import absreplay.api as abs
from coordinator.catalog import audit
from coordinator.dataflow.jobs import JobDefinition
from coordinator.dataflow.versions import version_of
from tests.helpers import cli_ok, make_workspace


def clicks(last: bool = False, per_page: bool = False, parallelism: int = 2) -> JobDefinition:
    """The README's clicks job, as a user changes it: a column more, an operator and sink more."""
    job = abs.Job("clicks", parallelism=parallelism)
    src = job.source("clicks", abs.json_lines({"user": str, "page": str, "ts": int}, time="ts"))
    columns = {"clicks": abs.count(), **({"last": abs.max("ts")} if last else {})}
    src.key_by("user", str).aggregate("per_user", **columns).sink("totals", abs.SqlTable("clicks_per_user"))
    if per_page:
        src.key_by("page", str).aggregate("per_page", clicks=abs.count()).sink("pages", abs.SqlTable("clicks_per_page"))
    return job.definition()


def test_a_version_changes_with_the_state_and_the_sinks_not_with_the_parallelism() -> None:
    base = version_of(clicks())
    assert version_of(clicks()) == base  # a digest of the declaration alone: the same in every process
    assert version_of(clicks(parallelism=4)).digest == base.digest
    with_last = version_of(clicks(last=True))
    with_page = version_of(clicks(per_page=True))
    assert len({base.digest, with_last.digest, with_page.digest}) == 3
    assert "per_user (keyed_reduce: user:string, clicks:long, updated:long)" in base.summary
    assert "last:long" in with_last.summary and "sinks totals <- per_user, pages <- per_page" in with_page.summary


def test_each_checkpoint_records_the_version_its_run_ran(tmp_path, sqlite_url) -> None:
    ws = make_workspace(tmp_path, sqlite_url, clicks())
    part = ws.input_dir / "p0"
    part.mkdir(parents=True)
    for n in range(3):
        (part / f"seg-{n}.jsonl").write_text(f'{{"user": "u{n}", "page": "p", "ts": {n}}}\n')
        ws.coordinator.inject()
    first, changed = clicks(), clicks(last=True, per_page=True)
    ws.store.begin_attempt("clicks", [1], "async", definition=first)
    ws.store.begin_attempt("clicks", [2, 3], "async", definition=changed)
    taken = {c.checkpoint_id: c.job_version for c in ws.store.checkpoints("clicks")}
    assert taken == {1: version_of(first).digest, 2: version_of(changed).digest, 3: version_of(changed).digest}
    assert audit.version_starts(ws.store.engine, "clicks") == [
        audit.VersionStart(1, version_of(first).digest, version_of(first).summary),
        audit.VersionStart(2, version_of(changed).digest, version_of(changed).summary)]
    page = audit.checkpoint_page(ws.store.engine, "clicks")  # the Airflow view's rows, newest first
    assert [(r.job_version, r.version_changed) for r in page.rows] == [
        (version_of(changed).digest, False), (version_of(changed).digest, True), (version_of(first).digest, False)]

    # the command line finds the job on disk; the history it prints is the catalog's
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "clicks.py").write_text(CLICKS_FILE)
    out = cli_ok(ws, "checkpoints", "clicks", env={"ABS_JOBS_DIR": str(jobs)})
    assert f"{version_of(first).digest}" in out and f"{version_of(changed).digest} (new)" in out
    assert out.count("(new)") == 1
    assert f"version {version_of(changed).digest} (from checkpoint 2): {version_of(changed).summary}" in \
        " ".join(out.split())


CLICKS_FILE = """import absreplay.api as abs
from coordinator.catalog import audit

job = abs.Job("clicks", parallelism=2)
clicks = job.source("clicks", abs.json_lines({"user": str, "page": str, "ts": int}, time="ts"))
clicks.key_by("user", str).aggregate("per_user", clicks=abs.count()).sink("totals", abs.SqlTable("clicks_per_user"))
"""
