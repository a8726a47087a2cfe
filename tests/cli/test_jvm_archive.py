"""The command line's class archive (``absreplay.commands.jvm_archive``): a home's first run dumps Spark's
classes as it exits, and the next one maps them (``-Xshare:on`` makes a JVM that cannot fail).

The suite's own speed guard: a Spark JVM started as the tests start one (spark-submit, the JVM options
from tests/conftest.py) maps the class archive and has the tests' Spark settings (no generated code, no broadcast
joins).

Without the archive every spark-submit of the suite loads Spark's classes one by one (12 s against 7 s for a
session and one small job), and nothing else says so: a JVM that cannot map it runs without it, silently.
That happened once, when a folder on Spark's classpath made the archive impossible to dump, and the suite
took twice as long. ``-Xshare:on`` makes such a JVM fail instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from absreplay.commands import jvm_archive, submit
from tests.conftest import ARCHIVE_ENV, JVM_OPTIONS, NO_ARCHIVE_ENV, SPARK_SETTINGS
from tests.helpers import ABSREPLAY, make_workspace

APP = """import json
from pyspark.sql import SparkSession
s = SparkSession.builder.getOrCreate()
print(json.dumps({key: s.conf.get(key) for key in %r}))
s.stop()
""" % sorted(SPARK_SETTINGS)


@pytest.mark.spark  # a Spark application of its own
def test_a_spark_submit_maps_the_class_archive_and_has_the_tests_spark_settings(tmp_path) -> None:
    assert NO_ARCHIVE_ENV not in os.environ, f"no JVM class archive: {os.environ[NO_ARCHIVE_ENV]}"
    mapped = ["--driver-java-options", "-Xshare:on"] if os.environ.get(ARCHIVE_ENV) else []  # else turned off
    app = tmp_path / "app.py"
    app.write_text(APP)
    proc = subprocess.run(
        [submit.spark_submit_binary(), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         *submit.python_confs(), *mapped, str(app)],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == SPARK_SETTINGS


@pytest.mark.spark  # two Spark applications of their own: the first dumps the classes as it exits
@pytest.mark.heavy(seconds=60)
def test_a_homes_first_run_dumps_sparks_classes_and_the_next_run_maps_them(tmp_path, sqlite_url) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    folder = tmp_path / "jvm"
    folder.mkdir()
    gone = folder / "spark-0123456789abcdef.jsa"  # a reinstall's predecessor, two days old
    gone.write_text("")
    os.utime(gone, (time.time() - 2 * 86400,) * 2)
    # not the suite's archive: a JVM dumps only on top of the JDK's own
    env = {**os.environ, **ws.env(), jvm_archive.ARCHIVE_ENV: str(folder), "JAVA_TOOL_OPTIONS": JVM_OPTIONS}

    def process(**more: str) -> None:
        proc = subprocess.run([ABSREPLAY, "process", "wordcount"], env={**env, **more}, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    for batch in range(2):
        ws.land(batch, lines=40)
        ws.coordinator.inject()
        # the second run's driver (SPARK_SUBMIT_OPTS: the driver JVM, not spark-submit's launcher) fails
        # unless it maps the archive the first one left
        process(**({"SPARK_SUBMIT_OPTS": "-Xshare:on"} if batch else {}))
        assert [p.name for p in folder.iterdir()] == [jvm_archive.archive_path(folder, JVM_OPTIONS).name]
    ws.coordinator.finalize()
    assert ws.committed() == ws.expected_at(2)


@pytest.mark.parametrize("broken", ["folder", "java"])
def test_an_archive_folder_that_cannot_be_made_or_no_java_to_ask_only_costs_speed(
        broken, tmp_path, monkeypatch, capsys) -> None:
    from coordinator.settings import Settings

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", JVM_OPTIONS)  # not the suite's archive, which a run would leave alone
    if broken == "folder":
        monkeypatch.setenv(jvm_archive.ARCHIVE_ENV, str(tmp_path / "a-file" / "jvm"))
    else:  # spark-submit would say so itself
        monkeypatch.delenv(jvm_archive.ARCHIVE_ENV)  # the default folder, under ABS_HOME
        monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    options, ended = jvm_archive.for_run(Settings.from_env({"ABS_HOME": str(tmp_path)}))
    ended(0)
    assert options == ""
    assert "no archive of Spark's classes" in capsys.readouterr().out


def test_an_archive_made_ahead_of_the_runs_is_made_once_and_a_failure_leaves_nothing(tmp_path, monkeypatch) -> None:
    """``submit.make_jvm_archive`` (the Airflow demo's): a spark-submit that fails costs a line, not the
    demo, and leaves no file; an archive in place is not made again. (Its real dump is the tests' own
    archive, made by ``tests.jvm_archive.ensure`` through ``jvm_archive.make``.)"""
    from coordinator.settings import Settings

    settings = Settings.from_env({"ABS_HOME": str(tmp_path)})
    monkeypatch.setenv(jvm_archive.ARCHIVE_ENV, str(tmp_path / "jvm"))
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", JVM_OPTIONS)  # not the suite's archive, which a run would leave alone
    failing = tmp_path / "spark-submit"
    failing.write_text("#!/bin/sh\necho 'Error: the JVM could not start' >&2\nexit 1\n")
    failing.chmod(0o755)
    monkeypatch.setattr(submit, "spark_submit_binary", lambda: str(failing))
    line = submit.make_jvm_archive(settings)
    assert line == "no archive of Spark's classes (Error: the JVM could not start): runs load them one by one"
    assert list((tmp_path / "jvm").iterdir()) == []
    jvm_archive.wanted(settings).write_bytes(b"an archive")
    assert submit.make_jvm_archive(settings) is None
