"""Jobs found as plugins: a jobs folder with one good job file and five broken ones.

Each broken file (a syntax error, an import error, an incomplete job, a name an installed
package's job already has, a name against the naming rule) is listed with its error by
discovery, ``absreplay jobs`` and the DagBag's warnings, and hides none of the good jobs. No
Spark: job files import pyspark's Python API only, as a declaration needs no JVM.
"""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path

from absreplay.commands.airflow_demo import dags_folder, isolate_airflow_home

isolate_airflow_home()  # before airflow is imported: its configuration is read once

import pytest  # noqa: E402
from rich.console import Console  # noqa: E402

from coordinator.dataflow import discovery as job_discovery  # noqa: E402
from absreplay.commands import cli as absreplay_cli  # noqa: E402
from coordinator.dataflow.discovery import discover, get_job  # noqa: E402
from coordinator.errors import UnknownJobError  # noqa: E402
from tests.helpers import JOBS_DIR, cli, cli_ok, one_line_error  # noqa: E402

MINI = '''\
"""mini: words of text lines, counted per word into a SQL table."""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import absreplay.api as abs


def words(lines: DataFrame) -> DataFrame:
    return lines.select(F.explode(F.split(F.col("line"), " ")).alias("word")).where(F.col("word") != "")


job = abs.Job("mini", description="a tiny word count", parallelism=1)
(
    job.source("lines", abs.TextLines())
    .flat_map("words", words)
    .key_by("word", str)
    .aggregate("tally", n=abs.count())
    .sink("counts", abs.SqlTable("mini_counts"))
)
'''

BROKEN = {
    # a comma forgotten on line 4
    "syntax_error.py": 'import absreplay.api as abs\n\njob = abs.Job("typo")\n'
                       'job.source("lines", abs.TextLines()).flat_map("words" lambda df: df)\n',
    # an API that does not exist (yet), imported on line 3
    "import_error.py": '"""Uses windows."""\n\nfrom absreplay.api import TumblingWindow\n',
    # a source and an operator, but no keyed operator and no sink
    "incomplete.py": 'import absreplay.api as abs\n\njob = abs.Job("half")\n'
                     'job.source("lines").map("upper", lambda df: df)\n',
    # the name of an installed package's job
    "duplicate.py": 'import absreplay.api as abs\n\njob = abs.Job("wordcount")\n'
                    '(job.source("lines").key_by("line", str).aggregate("seen", n=abs.count())\n'
                    ' .sink("out", abs.SqlTable("my_wordcount")))\n',
    # a complete job, but its name would be a path out of ABS_DATA_DIR
    "bad_name.py": 'import absreplay.api as abs\n\njob = abs.Job("../../evil")\n'
                   '(job.source("lines").key_by("line", str).aggregate("seen", n=abs.count())\n'
                   ' .sink("out", abs.SqlTable("evil")))\n',
}

EXPECTED_ERRORS = {
    "syntax_error.py": ["SyntaxError", "(syntax_error.py, line 4)"],
    "import_error.py": ["ImportError", "TumblingWindow", "(import_error.py, line 3)"],
    "incomplete.py": ["job 'half' declares no keyed operator"],
    "duplicate.py": ["job 'wordcount' is declared already by entry point wordcount"],
    "bad_name.py": ["ValueError: job name '../../evil' must be letters, digits", "(bad_name.py, line 3)"],
}

#: the jobs of the installed examples package (its entry points)
INSTALLED = sorted(ep.name for ep in entry_points(group="absreplay.jobs"))
MINI_CHAIN = "lines(source) -> words(flat_map) => tally(aggregate) -> counts(sink)"


@pytest.fixture
def jobs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh jobs folder as ABS_JOBS_DIR, with discovery's per-process cache emptied."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "mini.py").write_text(MINI)
    (folder / "_helpers.py").write_text("raise RuntimeError('files starting with _ are not job files')\n")
    for name, text in BROKEN.items():
        (folder / name).write_text(text)
    monkeypatch.setenv("ABS_JOBS_DIR", str(folder))
    monkeypatch.setattr(job_discovery, "_FOUND", {})
    return folder


@pytest.fixture
def env(tmp_path: Path, sqlite_url: str) -> dict[str, str]:
    return {"ABS_DATABASE_URL": sqlite_url, "ABS_HOME": str(tmp_path / "home")}


def assert_broken_listed(errors: dict[str, str], folder: Path) -> None:
    assert set(errors) == {str(folder / name) for name in BROKEN}
    for name, needles in EXPECTED_ERRORS.items():
        for needle in needles:
            assert needle in errors[str(folder / name)], errors[str(folder / name)]


def test_discovery_finds_the_good_jobs_and_lists_each_broken_file(jobs_dir: Path) -> None:
    found = discover()
    assert set(found.jobs) == {"mini", *INSTALLED}
    assert found.jobs["mini"].origin == str(jobs_dir / "mini.py")
    # the folder's duplicate did not replace the installed package's job
    assert found.jobs["wordcount"].origin == "entry point wordcount = absreplay_examples.wordcount:job"
    assert found.jobs["mini"].sinks[0].column_names == ("word", "n")
    assert_broken_listed({b.origin: b.error for b in found.broken}, jobs_dir)
    assert all("\n" not in b.error and "<frozen" not in b.error for b in found.broken)


def test_unknown_job_names_the_known_jobs_and_the_broken_files(jobs_dir: Path) -> None:
    with pytest.raises(UnknownJobError) as raised:
        get_job("nope")
    message = str(raised.value)
    assert message.startswith(f"unknown job 'nope'; known jobs: {', '.join(sorted(['mini', *INSTALLED]))}")
    for name in BROKEN:
        assert str(jobs_dir / name) in message


def test_jobs_command_lists_the_jobs_then_the_broken_files(jobs_dir: Path, env: dict[str, str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # wide enough that no cell folds: this test reads content, not layout
    monkeypatch.setattr(absreplay_cli, "out", Console(width=1000))
    out = cli_ok(None, "jobs", env=env)
    table, _, broken = out.partition("job files that failed to load")
    for text in ("mini", "a tiny word count", str(jobs_dir / "mini.py"), "=> tally(aggregate)",
                 "counts: SQL table mini_counts in the catalog database; columns word, n", "not registered yet",
                 "entry point wordcount = absreplay_examples.wordcount:job", "~> labels"):
        assert text in table, text
    lines = [ln.strip() for ln in broken.strip().splitlines()]
    assert len(lines) == len(BROKEN)
    assert_broken_listed(dict(ln.split(": ", 1) for ln in lines), jobs_dir)


def test_jobs_json_has_each_graph_and_the_broken_files(jobs_dir: Path, env: dict[str, str]) -> None:
    listing = json.loads(cli_ok(None, "jobs", "--json", env=env))
    jobs = {job["name"]: job for job in listing["jobs"]}
    assert set(jobs) == {"mini", *INSTALLED}
    mini = jobs["mini"]
    assert mini["origin"] == str(jobs_dir / "mini.py")
    assert [(o["name"], o["kind"], o["parallelism"]) for o in mini["operators"]] == [
        ("lines", "source", 1), ("words", "flat_map", 1), ("tally", "aggregate", 1), ("counts", "sink", 1)]
    assert [(e["source"], e["target"], e["partitioning"]) for e in mini["edges"]] == [
        ("lines", "words", "forward"), ("words", "tally", "hash"), ("tally", "counts", "forward")]
    assert mini["graph"] == [MINI_CHAIN]
    assert mini["sinks"] == [{"name": "counts", "kind": "SqlTable",
                              "target": "SQL table mini_counts in the catalog database",
                              "columns": [{"name": "word", "type": "string"}, {"name": "n", "type": "long"}]}]
    assert mini["catalog"] == {"registered": False}
    cc = jobs["connected_components"]
    assert [(e["source"], e["target"]) for e in cc["edges"] if e["back_edge"]] == [("feedback", "labels")]
    assert cc["graph"] == ["source(source) -> parse(flat_map) => labels(iterate_head) -> propagate(flat_map) "
                           "=> feedback(iterate_tail) ~> labels", "labels -> sink(sink)"]
    assert_broken_listed({b["origin"]: b["error"] for b in listing["broken"]}, jobs_dir)


def test_jobs_lists_without_a_migrated_catalog(jobs_dir: Path, tmp_path: Path) -> None:
    env = {"ABS_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.db'}", "ABS_HOME": str(tmp_path / "home")}
    listing = json.loads(cli_ok(None, "jobs", "--json", env=env))
    assert {job["name"]: job["catalog"] for job in listing["jobs"]} == {
        "mini": None, **dict.fromkeys(INSTALLED)}
    assert len(listing["broken"]) == len(BROKEN)
    assert "has no schema yet: `absreplay db upgrade` creates it" in cli_ok(None, "jobs", env=env)


def test_a_jobs_folder_that_is_no_directory_is_bad_input(tmp_path: Path, env: dict[str, str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_discovery, "_FOUND", {})
    r = cli(None, "jobs", env={**env, "ABS_JOBS_DIR": str(tmp_path / "missing")})
    one_line_error(r, f"ABS_JOBS_DIR={tmp_path / 'missing'} is not a directory")


def test_dagbag_makes_the_good_jobs_dags_and_warns_of_each_broken_file(jobs_dir: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    # Airflow 3.3's DagBag has no include_examples: the isolated home sets load_examples False
    bag = DagBag(dag_folder=str(dags_folder()))
    assert bag.import_errors == {}
    for job in ("mini", *INSTALLED):
        for kind in ("barriers", "epochs", "recover"):
            assert f"abs_{job}_{kind}" in bag.dags
    for dag_file in ("abs_barriers.py", "abs_epochs.py", "abs_recover.py"):
        warned = "\n".join(bag.captured_warnings[str(dags_folder() / dag_file)])
        for name, needles in EXPECTED_ERRORS.items():
            assert f"job file {jobs_dir / name} failed to load: " in warned, warned
            assert needles[0] in warned


# -- names: the rule, at declaration and on the command line ----------------------------------------
RULE = "must be letters, digits, _ and -, starting with a letter or digit, at most 64 characters"
BAD_NAMES = ["../../evil", "a b", "x" * 65, "", "-dash-first", "naïve", "tab\t"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_job_name_is_refused_at_declaration(name: str) -> None:
    import absreplay.api as abs

    with pytest.raises(ValueError) as raised:
        abs.Job(name)
    assert str(raised.value) == f"job name {name!r} {RULE}"


@pytest.mark.parametrize("what", ["source", "operator", "sink"])
@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_source_operator_and_sink_names_are_refused_at_declaration(what: str, name: str) -> None:
    import absreplay.api as abs

    job = abs.Job("named")
    declare = {
        "source": lambda: job.source(name),
        "operator": lambda: job.source("lines").map(name, lambda df: df),
        "sink": lambda: job.source("lines").sink(name, abs.SqlTable("t")),
    }[what]
    with pytest.raises(ValueError) as raised:
        declare()
    assert str(raised.value) == f"job 'named': {what} name {name!r} {RULE}"


def test_names_a_declaration_makes_keep_to_the_rule_too() -> None:
    """A window's late-record sink (``<window>_late``) and a loop's body and tail are operators too."""
    import absreplay.api as abs

    keyed = abs.Job("named").source("lines").key_by("k", str)
    with pytest.raises(ValueError, match=f"window 'w{{60}}': late-record sink name 'w{{60}}_late' {RULE}"):
        keyed.window("w" * 60, abs.Tumbling(minutes=1), time="t", n=abs.count())
    keyed.window("w" * 59, abs.Tumbling(minutes=1), time="t", n=abs.count())  # 64 with _late
    loop = abs.Loop(head=lambda *a: a[0], body=lambda df: df, back_edge={"k": str}, back_edge_key="k",
                    tail_name="back edge")
    with pytest.raises(ValueError, match=f"job 'named': loop tail name 'back edge' {RULE}"):
        keyed.iterate("labels", loop, state={"label": str})


def test_a_job_renamed_after_declaration_has_no_definition() -> None:
    """The definition checks again (a job file may set ``job.name`` after declaring it)."""
    import copy

    from absreplay_examples.wordcount import job

    renamed = copy.copy(job)
    renamed.name = "../../evil"
    with pytest.raises(ValueError, match=f"job name '../../evil' {RULE}"):
        renamed.definition()


def test_the_name_limit_fits_every_name_column_of_the_catalog() -> None:
    from coordinator.catalog.models import Base
    from coordinator.dataflow.jobs import NAME_MAX

    columns = [c for table in Base.metadata.tables.values() for c in table.columns if c.name in ("job", "operator", "sink")]
    assert len(columns) >= 8
    assert all(c.type.length >= NAME_MAX for c in columns), [(c.table.name, c.name, c.type.length) for c in columns]


def test_the_example_and_test_jobs_keep_to_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABS_JOBS_DIR", str(JOBS_DIR))
    monkeypatch.setattr(job_discovery, "_FOUND", {})
    found = discover()
    assert found.broken == [] and set(INSTALLED) < set(found.jobs)


#: every command that takes a job, with what else it needs
JOB_COMMANDS = [("inject",), ("process",), ("finalize",), ("run",), ("checkpoints",), ("recover",),
                ("rewind", "--to", "1"), ("recoveries",), ("verify",), ("state", "--checkpoint", "1"),
                ("diff", "--from", "1", "--to", "2"), ("report",)]


@pytest.mark.parametrize("name", ["../../evil", "a b", "x" * 65, ""], ids=["path", "space", "65", "empty"])
@pytest.mark.parametrize("command", JOB_COMMANDS, ids=" ".join)
def test_every_command_refuses_a_bad_job_name_in_one_line(jobs_dir: Path, env: dict[str, str], command: tuple,
                                                          name: str) -> None:
    one_line_error(cli(None, command[0], name, *command[1:], env=env), f"job name {name!r} {RULE}")
