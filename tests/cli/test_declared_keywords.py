"""A misspelt keyword is refused as the job is declared, naming the job, the operator, the keyword and
the closest valid one; its job file is listed as broken, and every other job of the folder still lists
and injects. Discovery never fails on a job file, whatever the file raises. No Spark: declarations need
no JVM."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import absreplay.api as abs
from coordinator.dataflow import discovery as job_discovery
from coordinator.dataflow.declaration import JobDeclaration
from coordinator.dataflow.discovery import discover
from coordinator.keywords import keywords_of
from tests.helpers import cli, cli_ok, one_line_error

GOOD = '''\
import absreplay.api as abs

job = abs.Job("lines_seen", parallelism=1)
(job.source("lines", abs.TextLines())
 .key_by("line", str)
 .aggregate("seen", ttl_epochs=3, n=abs.count())
 .sink("out", abs.SqlTable("lines_seen")))
'''



def clicks_job(job: str, declaration: str) -> str:
    """A job file declaring ``job`` whose line 5 is ``declaration``, on a keyed stream of clicks."""
    return (f'import absreplay.api as abs\n\njob = abs.Job("{job}")\n'
            f'clicks = job.source("clicks", abs.json_lines({{"user": int, "ts": int}}, time="ts")).key_by("user", int)\n'
            f"{declaration}\n")


#: job files with a misspelt keyword: (the file, what its broken listing says)
MISSPELT = {
    "window_typo.py": (clicks_job("clicks", '(clicks.window("w", abs.Tumbling(minutes=5), time="ts", dealy_ms=60_000, '
                                            'clicks=abs.count())\n .sink("out", abs.SqlTable("w")))'),
                       "job clicks: window 'w': unknown keyword dealy_ms (did you mean delay_ms?) "
                       "(window_typo.py, line 5)"),
    "aggregate_typo.py": (clicks_job("agg", 'clicks.aggregate("a", ttl_epoch=2, n=abs.count()).sink("out", '
                                            'abs.SqlTable("a"))'),
                          "job agg: aggregate 'a': unknown keyword ttl_epoch (did you mean ttl_epochs?)"),
    "join_typo.py": (clicks_job("joins", 'clicks.join("j", clicks, reemitt=True)'),
                     "job joins: join 'j': unknown keyword reemitt (did you mean reemit?)"),
    "interval_typo.py": (clicks_job("intervals", 'clicks.interval_join("j", clicks, time="ts", lower_ms=0, uper_ms=10)'),
                         "job intervals: interval_join 'j': unknown keyword uper_ms (did you mean upper_ms?)"),
    "job_typo.py": ('import absreplay.api as abs\n\njob = abs.Job("typo_job", paralellism=4)\n',
                    "job typo_job: unknown keyword paralellism (did you mean parallelism?) (job_typo.py, line 3)"),
    "format_typo.py": ('import absreplay.api as abs\n\njob = abs.Job("fmt")\n'
                       'job.source("s", abs.json_lines({"ts": int}, tme="ts"))\n',
                       "json_lines: unknown keyword tme (did you mean time?) (format_typo.py, line 4)"),
    "sink_typo.py": ('import absreplay.api as abs\n\njob = abs.Job("sinks")\n'
                     'job.source("s").key_by("line", str).aggregate("a", n=abs.count()).sink("out", '
                     'abs.SqlTable("t"), colums=("line", "n"))\n',
                     "job sinks: sink 'out': unknown keyword colums (did you mean columns?)"),
}

#: job files that raise what no declaration raises: each is listed with its one-line error
RAISING = {
    "exits.py": ("import sys\n\nsys.exit(3)\n", "SystemExit: 3 (exits.py, line 3)"),
    "bad_message.py": ("class Odd(Exception):\n    def __str__(self):\n        raise RuntimeError('no text')\n\n\n"
                       "raise Odd()\n", "Odd (bad_message.py, line 6)"),
    # a declaration changed by hand after it was made: its definition fails on what it was given
    "tampered.py": ('import absreplay.api as abs\n\njob = abs.Job("tampered")\n'
                    '(job.source("lines").key_by("line", str).aggregate("seen", n=abs.count())\n'
                    ' .sink("out", abs.SqlTable("tampered")))\n'
                    'job.node("seen").aggregates["m"] = 5\n', "AttributeError: 'int' object has no attribute"),
}


@pytest.fixture
def jobs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A jobs folder (ABS_JOBS_DIR) with one good job beside the broken files, discovery's cache emptied."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "good.py").write_text(GOOD)
    for name, (text, _) in {**MISSPELT, **RAISING}.items():
        (folder / name).write_text(text)
    monkeypatch.setenv("ABS_JOBS_DIR", str(folder))
    monkeypatch.setattr(job_discovery, "_FOUND", {})
    return folder


@pytest.fixture
def env(tmp_path: Path, sqlite_url: str) -> dict[str, str]:
    return {"ABS_DATABASE_URL": sqlite_url, "ABS_HOME": str(tmp_path / "home"), "ABS_DATA_DIR": str(tmp_path / "data")}


def assert_each_file_listed(errors: dict[str, str], folder: Path) -> None:
    assert set(errors) == {str(folder / name) for name in {**MISSPELT, **RAISING}}
    for name, (_, needle) in {**MISSPELT, **RAISING}.items():
        assert needle in errors[str(folder / name)], errors[str(folder / name)]
        assert "\n" not in errors[str(folder / name)]


def test_jobs_lists_the_good_job_and_each_broken_file_with_its_keyword(jobs_dir: Path, env: dict[str, str]) -> None:
    out = cli_ok(None, "jobs", env=env)
    assert "lines_seen" in out
    _, _, broken = out.partition("job files that failed to load")
    errors = dict(line.strip().split(": ", 1) for line in broken.strip().splitlines())
    assert_each_file_listed(errors, jobs_dir)
    listing = json.loads(cli_ok(None, "jobs", "--json", env=env))
    assert "lines_seen" in [job["name"] for job in listing["jobs"]]
    assert_each_file_listed({b["origin"]: b["error"] for b in listing["broken"]}, jobs_dir)


def test_the_good_job_injects_beside_the_broken_files(jobs_dir: Path, env: dict[str, str]) -> None:
    part = Path(env["ABS_DATA_DIR"]) / "lines_seen" / "input" / "p0"
    part.mkdir(parents=True)
    (part / "seg-1.txt").write_text("a\nb\na\n")
    r = cli(None, "inject", "lines_seen", env=env)
    assert r.code == 0 and "lines_seen: barrier 1 injected" in r.out and "p0@3" in r.out, r.out + r.err


def test_a_misspelt_job_is_unknown_in_one_line_naming_its_keyword(jobs_dir: Path, env: dict[str, str]) -> None:
    one_line_error(cli(None, "inject", "clicks", env=env),
                   "window 'w': unknown keyword dealy_ms (did you mean delay_ms?)")


# -- every declaring callable, every keyword --------------------------------------------------------
def _declaring() -> dict[str, tuple[Callable[..., Any], Callable[..., Any], str]]:
    """Each callable a job file declares with: (what a call is, the checked callable, the refusal's place)."""
    job = abs.Job("kw")
    stream = job.source("s")
    keyed = stream.key_by("k", str)
    calls: dict[str, tuple[Callable[..., Any], Callable[..., Any], str]] = {
        "Job": (lambda **kw: abs.Job("kw", **kw), JobDeclaration.__init__, "job kw"),
        "Job.source": (lambda **kw: job.source("op", **kw), abs.Job.source, "job kw: source 'op'"),
        "Stream.key_by": (lambda **kw: stream.key_by("k", **kw), abs.Stream.key_by, "job kw: key_by"),
    }
    for owner, on in ((abs.Stream, stream), (abs.KeyedStream, keyed)):
        for name, method in vars(owner).items():
            if not name.startswith("_") and f"{owner.__name__}.{name}" not in calls:
                calls[f"{owner.__name__}.{name}"] = (functools.partial(method, on, "op"), method, f"job kw: {name} 'op'")
    for name in abs.__all__:
        declared = getattr(abs, name)
        if name in ("Job", "Stream", "KeyedStream") or getattr(declared, "_is_protocol", False) or not (
                inspect.isclass(declared) or inspect.isfunction(declared)):
            continue  # the builder's own classes (above), protocols and type aliases declare nothing
        calls[name] = (declared, declared.__init__ if isinstance(declared, type) else declared, name)
    return calls


DECLARING = _declaring()


def test_every_public_callable_and_operator_is_covered() -> None:
    """A new operator or declaration class joins the tests below by itself: none escapes the check."""
    operators = {f"{owner.__name__}.{name}" for owner in (abs.Stream, abs.KeyedStream) for name in vars(owner)
                 if not name.startswith("_")}
    assert {"KeyedStream.window", "KeyedStream.aggregate", "KeyedStream.interval_join", "Stream.sink"} <= operators
    assert {"Job", "Job.source", "SqlTable", "TextLines", "json_lines", "Tumbling", "CheckpointPolicy"} <= set(DECLARING)
    assert [name for name in vars(abs.Job) if not name.startswith("_")] == ["source", "definition"]
    assert list(inspect.signature(abs.SqlTable).parameters) == ["table", "url"]  # a checked class keeps its signature


def _refusal(call: str, typo: str) -> str:
    with pytest.raises(ValueError) as raised:
        DECLARING[call][0](**{typo: 1})  # 1 is no aggregate either: a misspelt option, never a column
    return str(raised.value)


CASES = [(call, keyword) for call, (_, checked, _) in DECLARING.items() for keyword in keywords_of(checked)]


@pytest.mark.parametrize(("call", "keyword"), CASES, ids=[f"{c}-{k}" for c, k in CASES])
def test_a_misspelt_keyword_names_the_place_and_the_keyword_meant(call: str, keyword: str) -> None:
    typo = keyword + keyword[-1]
    assert _refusal(call, typo) == f"{DECLARING[call][2]}: unknown keyword {typo} (did you mean {keyword}?)"


@given(st.sampled_from(CASES), st.integers(0, 40), st.sampled_from("abcdefghijklmnopqrstuvwxyz_"),
       st.sampled_from(["delete", "insert", "replace", "swap"]))
def test_any_keyword_a_call_does_not_take_is_refused_by_its_name(case: tuple[str, str], at: int, char: str,
                                                                 edit: str) -> None:
    call, keyword = case
    i = at % len(keyword)
    typo = {"delete": keyword[:i] + keyword[i + 1:], "insert": keyword[:i] + char + keyword[i:],
            "replace": keyword[:i] + char + keyword[i + 1:], "swap": keyword[:i] + keyword[i + 1:i + 2]
            + keyword[i:i + 1] + keyword[i + 2:]}[edit]
    keywords = keywords_of(DECLARING[call][1])
    if typo in keywords or not typo:
        return  # the edit made a keyword the call takes: no typo to refuse
    message = _refusal(call, typo)
    assert message.startswith(f"{DECLARING[call][2]}: unknown keyword {typo} (") and "\n" not in message
    suggested = message.partition("(did you mean ")[2].removesuffix("?)")
    assert suggested in keywords if suggested else f"its keywords: {', '.join(keywords)}" in message


def test_an_aggregating_operator_takes_other_keywords_as_its_aggregates_only() -> None:
    keyed = abs.Job("kw").source("s").key_by("k", str)
    keyed.aggregate("a", ttl_epoch=abs.count())  # a column named ttl_epoch: an aggregate is what it holds
    with pytest.raises(ValueError) as raised:
        keyed.aggregate("b", views=abs.count(), zzz="ts")
    assert str(raised.value) == ("job kw: aggregate 'b': unknown keyword zzz (its keywords: name, ttl_epochs, "
                                 "ttl_ms, time; any other keyword names an aggregate, e.g. n=abs.count())")


def test_discovery_lists_what_a_declaration_of_any_kind_raises(jobs_dir: Path) -> None:
    found = discover()
    assert "lines_seen" in found.jobs
    assert_each_file_listed({b.origin: b.error for b in found.broken}, jobs_dir)
