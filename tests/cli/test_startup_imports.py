"""What a command pays for before it does anything: the command line, the processing application's driver
and every Airflow task start a fresh interpreter, dozens of times in a test run and in a day of DAG runs.
pandas (pulled in by ``pyarrow.dataset``) cost 0.9 s of a 2.4 s start on the 2-core reference machine; it
is imported where a dataset is read, never by importing these entry points."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path
from unittest import mock

import pytest

ENTRY_POINTS = ["absreplay.commands.cli", "spark_jobs.process", "absreplay.airflow.orchestration"]


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_an_entry_point_imports_no_pandas(module: str) -> None:
    code = f"import sys, {module}\nprint(sorted(m for m in ('pandas', 'pyarrow.dataset') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


APP = """import spark_jobs.python_path  # noqa: F401 - first, as in spark_jobs/process.py
import pyspark
from pyspark.sql import SparkSession


def where(_):
    import pyspark
    yield pyspark.__file__


s = SparkSession.builder.getOrCreate()
print("driver", pyspark.__file__)
print("worker", s.sparkContext.parallelize([1], 1).mapPartitions(where).collect()[0])
s.stop()
"""


@pytest.mark.spark  # a Spark application of its own
def test_a_local_run_imports_the_installed_pyspark_not_sparks_zip(tmp_path) -> None:
    """spark-submit puts Spark's pyspark.zip first on the driver's and the workers' path, and a module
    imported from a zip is compiled from source by every process; spark_jobs.python_path and the local-mode
    worker daemon put the installed package (with its bytecode) ahead of it."""
    from absreplay.commands import submit
    from coordinator.settings import Settings

    app = tmp_path / "app.py"
    app.write_text(APP)
    settings = Settings.from_env({"ABS_HOME": str(tmp_path / "home"), "ABS_SPARK_MASTER": "local[1]"})
    proc = subprocess.run(submit.submit_command(settings, ["x"], app), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-3000:]
    where = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("driver ", "worker ")))
    assert set(where) == {"driver", "worker"}, proc.stdout
    assert all(".zip" not in path and path.endswith("pyspark/__init__.py") for path in where.values()), where


def _spark_zips(tmp_path: Path, zipped: str, installed: str) -> list[str]:
    """A path as spark-submit makes it: its zips of pyspark and py4j first, then a site-packages folder."""
    site = tmp_path / "site"
    for package in ("pyspark", "py4j"):
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
        (site / package / "version.py").write_text(installed)
    zips = [tmp_path / "pyspark.zip", tmp_path / "py4j-0.10.9.9-src.zip"]
    for z, package in zip(zips, ("pyspark", "py4j"), strict=True):
        with zipfile.ZipFile(z, "w") as f:
            f.writestr(f"{package}/version.py", zipped)
    return [*map(str, zips), str(site)]


@pytest.mark.parametrize(("installed", "moved"), [('__version__ = "4.2.0"', True), ('__version__ = "4.1.0"', False)])
def test_sparks_zips_move_behind_the_same_installed_pyspark_only(tmp_path, installed: str, moved: bool) -> None:
    from spark_jobs import python_path

    path = _spark_zips(tmp_path, '__version__ = "4.2.0"', installed)
    original = list(path)
    with mock.patch.dict(sys.modules):
        sys.modules.pop("pyspark", None)
        assert python_path.prefer_installed_pyspark(path) is moved
    assert path == ([original[2], *original[:2]] if moved else original)
    with mock.patch.dict(sys.modules, {"pyspark": mock.Mock()}):  # imported already: too late to move
        assert not python_path.prefer_installed_pyspark(list(original))
