"""A class-data-sharing archive of Spark's classes for the applications the command line and the DAGs start.

Most of a small run's time is its JVM loading and verifying Spark's classes: each ``absreplay process``
is a spark-submit of its own (as each run of the epochs DAG is). JDK 17 can dump the classes a run
loaded (``-XX:ArchiveClassesAtExit``) and map them into later JVMs (``-XX:SharedArchiveFile``). So the
first application a home starts dumps them as it exits, and every later one maps them. On a 2-core
machine, an ``absreplay process`` of one epoch (600 records) with Spark's JVM defaults took 24.6 and
25.1 s (35 CPU-s) with the archive against 32.7 and 35.2 s (47-51 CPU-s) without; the run that dumps it,
60 s, once. The epochs DAG's ``process_epochs`` does the same (``absreplay.airflow.processing_run``);
``make`` dumps an archive ahead of the runs with an application of its own (the Airflow demo, the tests).

The archive lives in ``ABS_JVM_ARCHIVE`` (a folder; ``off``: none), by default ``<ABS_HOME>/jvm``, one
file per installation (Spark's jars, the Java runtime, this Python): a JVM maps only an archive made from
the very jar files on its classpath, and runs without one it cannot map, silently (its log lines are
off). Only speed depends on it: a run computes the same without it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import spark_jobs
from coordinator.settings import Settings

ARCHIVE_ENV = "ABS_JVM_ARCHIVE"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: a dump left by a run killed as it exited is removed after this long
STALE_DUMP_S = 3600
#: another installation's archive (a reinstall's predecessor) is removed after this long unused
STALE_ARCHIVE_S = 24 * 3600
#: the application that makes an archive ahead of the runs (``make``)
WARMUP_APP = Path(spark_jobs.__file__).resolve().parent / "jvm_warmup.py"


def spark_jars() -> Path:
    """pyspark's jar folder, found without importing pyspark (the command line never does)."""
    spec = importlib.util.find_spec("pyspark")
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def java_binary() -> str:
    """The Java that spark-submit runs (``bin/spark-class``): ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    return f"{home}/bin/java" if home else "java"


def archive_path(folder: Path, options: str = "") -> Path:
    """The archive for this installation and JVM ``options`` in ``folder``. A JVM checks that the jars are
    the files the archive was made from (size and modification time): a reinstall gets an archive of its
    own rather than one every JVM would refuse."""
    quiet = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}  # else its line is in the output
    java = subprocess.run([java_binary(), "-version"], capture_output=True, text=True, env=quiet).stderr
    jars = sorted(spark_jars().glob("*.jar"))
    stamps = "|".join(f"{j.name}:{j.stat().st_size}:{j.stat().st_mtime_ns}" for j in jars)
    key = f"{importlib.metadata.version('pyspark')}|{spark_jars()}|{java}|{sys.executable}|{options}|{stamps}"
    return folder / f"spark-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def wanted(settings: Settings) -> Path | None:
    """The archive runs of ``settings`` map, existing or not; None when it is off or cannot be had (a
    folder that cannot be made, no Java to ask: said in one line, as only speed depends on it)."""
    where = os.environ.get(ARCHIVE_ENV) or str(settings.home / "jvm")
    if where == "off":
        return None
    folder = Path(where)
    try:
        path = archive_path(folder, os.environ.get("JAVA_TOOL_OPTIONS", ""))
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.glob("*.tmp"):
                if time.time() - old.stat().st_mtime > STALE_DUMP_S:
                    old.unlink(missing_ok=True)
    except OSError as exc:
        print(f"no archive of Spark's classes ({exc}): this run loads them one by one", flush=True)
        return None
    return path


def for_run(settings: Settings) -> tuple[str, Callable[[int], bool]]:
    """The driver's JVM options for a run, and what to call with its exit code once it ended: map the
    archive, or dump it (to a file of this process's own, put in place only by a run that succeeded). That
    call says whether it put an archive in place (``dumping``)."""
    path = wanted(settings)
    if path is None:
        return "", lambda _code: False
    if path.exists():
        return f"-XX:SharedArchiveFile={path} {QUIET}", lambda _code: False
    print(f"first run of this installation: Spark's classes are saved to {path} as it ends (once; later runs "
          "start faster)", flush=True)
    return dumping(path)


def dumping(path: Path) -> tuple[str, Callable[[int], bool]]:
    """JVM options that dump the archive ``path`` as the JVM exits, to a file of this process's own, and what
    to call with the application's exit code: puts the dump in place if it succeeded and left one, else
    removes it; True once the archive is in place."""
    dump = path.with_suffix(f".{os.getpid()}.tmp")

    def done(code: int) -> bool:
        if code == 0 and dump.exists():
            put_in_place(dump, path)
            return True
        dump.unlink(missing_ok=True)
        return False

    return f"-XX:ArchiveClassesAtExit={dump} {QUIET}", done


def make(path: Path, submit: list[str], env: dict[str, str]) -> str | None:
    """Dump the archive ``path`` now with a small application of its own (``spark_jobs/jvm_warmup.py``: a
    session, shuffles, a join, Parquet, an Arrow UDF), started by ``submit`` (spark-submit and its options,
    with ``env``). None once it is in place, else why it is not."""
    options, done = dumping(path)
    try:
        ran = subprocess.run([*submit, "--driver-java-options", options, str(WARMUP_APP)], env=env,
                             capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        ran = subprocess.CompletedProcess([], 1, "", str(exc))
    if done(ran.returncode):
        return None
    return (ran.stdout[-500:] + ran.stderr[-2000:]).strip() or f"exit code {ran.returncode}"


def put_in_place(dump: Path, path: Path) -> None:
    """``dump`` becomes the archive ``path``; the other installations' archives beside it (about 160 MB each,
    a reinstall's predecessors) go once a day old: a JVM mapping one keeps its mapping."""
    os.replace(dump, path)
    for old in path.parent.glob("spark-*.jsa"):
        if old != path and time.time() - old.stat().st_mtime > STALE_ARCHIVE_S:
            old.unlink(missing_ok=True)
