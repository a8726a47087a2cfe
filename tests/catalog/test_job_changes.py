"""What changed between two versions of a job (coordinator.dataflow.changes), part by part, and the code digest
that makes a changed filter a new version while a moved one is not (coordinator.dataflow.code_digest)."""

from __future__ import annotations

import os
import subprocess
import sys

import pyspark.sql.functions as F

import absreplay.api as abs
from coordinator.dataflow.changes import Change, compare
from coordinator.dataflow.jobs import JobDefinition
from coordinator.dataflow.versions import describe
from tests.catalog.test_job_versions import clicks


def changes(old: JobDefinition, new: JobDefinition) -> dict[tuple[str, str], tuple[Change, str]]:
    return {(p.part, p.name): (p.change, p.detail) for p in compare(describe(old), describe(new)).parts}


def test_a_new_column_and_a_new_operator_and_sink_need_an_upgrade_that_keeps_the_rest() -> None:
    found = compare(describe(clicks()), describe(clicks(last=True, per_page=True)))
    assert {(p.part, p.name): (p.change, p.detail) for p in found.parts} == {
        ("operator", "clicks"): (Change.UNCHANGED, ""),
        ("operator", "per_user"): (Change.COMPATIBLE, "new column last:long"),
        ("operator", "per_page"): (Change.NEW, ""),
        ("sink", "totals"): (Change.COMPATIBLE, "new column last:long"),
        ("sink", "pages"): (Change.NEW, ""),
    }
    assert found.needs_upgrade and not found.incompatible
    effects = {p.name: p.effect for p in found.parts}
    assert effects["totals"] == "its rows restated with the new columns (the table gains them)"
    assert effects["pages"] == "gets the backfilled output"


def test_the_same_job_at_another_parallelism_or_with_a_removed_operator_runs_on() -> None:
    assert not compare(describe(clicks()), describe(clicks(parallelism=4))).needs_upgrade
    found = compare(describe(clicks(per_page=True)), describe(clicks()))
    assert {(p.part, p.name): p.change for p in found.parts if p.change is not Change.UNCHANGED} == {
        ("operator", "per_page"): Change.REMOVED, ("sink", "pages"): Change.REMOVED}
    assert not found.needs_upgrade


def keyed(key_type: type = str, minutes: int = 10, threshold: int = 3, aggregate=None) -> JobDefinition:
    job = abs.Job("clicks")
    src = job.source("clicks", abs.json_lines({"user": str, "page": str, "ts": int}, time="ts"))
    busy = src.filter("busy", lambda df: df.where(F.col("ts") > threshold))
    busy.key_by("user", key_type).aggregate("per_user", clicks=aggregate or abs.count()).sink(
        "totals", abs.SqlTable("clicks_per_user"))
    src.key_by("page", str).window("per_10_minutes", abs.Tumbling(minutes=minutes), time="ts",
                                   clicks=abs.count()).sink("windows", abs.SqlTable("page_windows"))
    return job.definition()


def test_a_changed_key_window_aggregate_or_filter_is_incompatible_and_so_is_what_it_feeds() -> None:
    base = keyed()
    assert not compare(describe(base), describe(keyed())).needs_upgrade
    key = changes(base, keyed(key_type=int))
    assert key[("operator", "per_user")] == (Change.INCOMPATIBLE, "key column user string -> long")
    assert key[("sink", "totals")] == (Change.INCOMPATIBLE, "key column user string -> long")
    assert key[("operator", "per_10_minutes")] == (Change.UNCHANGED, "")
    window = changes(base, keyed(minutes=5))
    assert window[("operator", "per_10_minutes")] == (
        Change.INCOMPATIBLE, "window {kind=Tumbling, minutes=10, ms=0} -> {kind=Tumbling, minutes=5, ms=0}")
    assert window[("sink", "windows")] == (Change.INCOMPATIBLE, "fed by per_10_minutes, which changed incompatibly")
    assert changes(base, keyed(aggregate=abs.sum("ts")))[("operator", "per_user")] == (
        Change.INCOMPATIBLE, "aggregate clicks count():long -> sum(ts):long")
    # the filter's captured threshold is part of its code's digest; what it feeds is rebuilt with it
    fil = changes(base, keyed(threshold=4))
    assert fil[("operator", "busy")] == (Change.INCOMPATIBLE, "its function changed")
    assert fil[("operator", "per_user")] == (Change.INCOMPATIBLE, "fed by busy, which changed incompatibly")
    assert fil[("sink", "totals")] == (Change.INCOMPATIBLE, "fed by per_user, which changed incompatibly")
    assert fil[("operator", "per_10_minutes")] == (Change.UNCHANGED, "")


JOB_FILE = """import absreplay.api as abs
import pyspark.sql.functions as F
{header}
MIN_TS = {threshold}


def busy(df):
    return df.where(F.col("ts") > MIN_TS)


job = abs.Job("clicks")
src = job.source("clicks", abs.json_lines({{"user": str, "ts": int}}, time="ts"))
src.filter("busy", busy).key_by("user", str).aggregate("per_user", clicks=abs.count()).sink(
    "totals", abs.SqlTable("clicks_per_user"))
"""


def test_a_job_files_version_is_the_same_in_every_process_and_changes_with_its_code(tmp_path) -> None:
    """Python's hash seed differs between processes; a comment above the function moves its lines."""
    def digest(threshold: int, header: str = "", seed: str = "1") -> str:
        folder = tmp_path / f"{threshold}-{len(header)}-{seed}"
        folder.mkdir()
        (folder / "clicks.py").write_text(JOB_FILE.format(threshold=threshold, header=header))
        code = ("from coordinator.dataflow.discovery import get_job; from coordinator.dataflow.versions import version_of; "
                "print(version_of(get_job('clicks')).digest)")
        env = {**os.environ, "ABS_JOBS_DIR": str(folder), "PYTHONHASHSEED": seed}
        return subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    first = digest(18)
    assert digest(18, seed="2") == first
    assert digest(18, header="# the clicks of each user\n\n") == first
    assert digest(21) != first
