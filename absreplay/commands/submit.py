"""Start the processing application the way Airflow does: spark-submit of spark_jobs/process.py.

The command line never imports pyspark; the driver runs in this same Python
(so the installed packages are on its path) and reads its settings from the
environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import spark_jobs
from absreplay.commands import jvm_archive
from absreplay.commands.pyfiles import build_pyfiles_zip
from spark_jobs.python_path import daemon_confs
from coordinator.errors import AbsError, ConfigError
from coordinator.settings import Settings

PROCESS_APP = Path(spark_jobs.__file__).resolve().parent / "process.py"
VERIFY_APP = PROCESS_APP.parent / "verify.py"
LOG4J_CONFIG = PROCESS_APP.parent / "log4j2.properties"


def executable(name: str) -> str:
    """A command installed next to this Python (the project's virtualenv), else on PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        raise ConfigError(f"{name} is not installed next to this Python nor on PATH (pip install -e .)")
    return found


def spark_submit_binary() -> str:
    return executable("spark-submit")


def python_confs() -> list[str]:
    return [
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
    ]


def submit_command(settings: Settings, app_args: list[str], app: Path = PROCESS_APP, java_options: str = "") -> list[str]:
    return [
        spark_submit_binary(),
        "--master", settings.spark_master,
        "--name", f"absreplay-{app_args[0]}",
        "--driver-memory", os.environ.get("ABS_DRIVER_MEMORY", "2g"),
        "--conf", "spark.ui.enabled=false",
        "--driver-java-options", f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG} {java_options}".strip(),
        # the code reaches a cluster's driver and executors the way the DAG ships it
        "--py-files", str(build_pyfiles_zip(settings.home / "pyfiles")),
        *python_confs(),
        *(arg for key, value in daemon_confs(settings.spark_master).items() for arg in ("--conf", f"{key}={value}")),
        str(app),
        *app_args,
    ]


def run_processing(settings: Settings, app_args: list[str], app: Path = PROCESS_APP) -> int:
    """Run a Spark application of the project in the foreground; returns its exit code."""
    env = {**os.environ, **settings.as_env(), "PYSPARK_PYTHON": sys.executable}
    java_options, ended = jvm_archive.for_run(settings)  # Spark's classes mapped from an archive, or dumped
    try:
        code = subprocess.run(submit_command(settings, app_args, app, java_options), env=env).returncode
    except OSError as exc:
        raise AbsError(f"could not start spark-submit: {exc}") from None
    ended(code)
    return code


def dump_jvm_archive(path: Path, env: dict[str, str] | None = None) -> str | None:
    """Dump the archive of Spark's classes ``path`` now, with the warm-up application on a local master
    (``jvm_archive.make``), ``env`` added to this process's. None once it is in place, else why it is not."""
    submit = [spark_submit_binary(), "--master", "local[2]", "--conf", "spark.ui.enabled=false", *python_confs()]
    return jvm_archive.make(path, submit, {**os.environ, **(env or {}), "PYSPARK_PYTHON": sys.executable})


def make_jvm_archive(settings: Settings) -> str | None:
    """Make the archive of Spark's classes that runs of ``settings`` map, if it is missing (the Airflow demo
    makes it while Airflow migrates its database and runs the first barriers, so that no run of its DAGs
    dumps it). A line saying what happened, or None when there was nothing to do."""
    path = jvm_archive.wanted(settings)
    if path is None or path.exists():
        return None
    started = time.perf_counter()
    error = dump_jvm_archive(path)
    if error is not None:
        return f"no archive of Spark's classes ({error.splitlines()[-1]}): runs load them one by one"
    return f"Spark's classes saved to {path} in {time.perf_counter() - started:.0f}s (once): runs map them"


def run_in_session(spark, app_args: list[str], app: Path = PROCESS_APP) -> int:
    """Run an application of the project in this process on ``spark``, which stays open (tests,
    notebooks): what spark-submit would run, without starting a JVM. Returns its exit code."""
    from spark_jobs import process, verify

    return {PROCESS_APP: process.run, VERIFY_APP: verify.run}[app](app_args, spark=spark)
