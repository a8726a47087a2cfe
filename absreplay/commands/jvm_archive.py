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
file per installation (Spark's jars, the Java runtime, this Python, the environment that shapes the JVM's
class path and options): a JVM maps only an archive made from the very jar files on its classpath, and
runs without one it cannot map, silently (its log lines are off). Only speed depends on it: a run computes
the same without it, so it must never fail one.

A JVM cannot dump in every environment: a non-empty folder on its class path (a ``SPARK_CONF_DIR`` with a
``spark-defaults.conf``, a ``HADOOP_CONF_DIR``) makes it fail as it exits, after the run did its work, and
options such as ``-Xshare:off`` make it fail as it starts. So before a run is asked to dump, the command
Spark's launcher would build for it is probed (``refusal``): its class path is checked for non-empty
folders and a JVM of that class path and those options dumps a small archive. Where either fails, the
archive is off for that environment (a ``.refused`` file beside it says why, once) and runs load the
classes one by one. Where the environment's own JVM options choose class sharing, it is left to them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
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
#: environment variables whose JVM options every JVM of a run takes
JVM_OPTION_VARS = ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS")
#: what else shapes the class path of the JVM that spark-submit starts (``bin/spark-class``)
LAUNCH_VARS = ("SPARK_HOME", "SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH")
#: JVM options by which a user chooses class sharing for themselves (``-Xshare:on`` only insists on it)
OWN_SHARING = re.compile(r"-Xshare:off|-XX:(SharedArchiveFile|ArchiveClassesAtExit)=|-XX:[+-]AutoCreateSharedArchive")
#: a shell that sets Spark's environment as ``bin/spark-class`` does, then runs Spark's launcher (which prints
#: the command spark-submit would exec, NUL-separated) or, with a class path given, any class of that JVM
LAUNCHER = ('. "$SPARK_HOME/bin/load-spark-env.sh" && '
            'exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" "$@"')
#: the application that makes an archive ahead of the runs (``make``)
WARMUP_APP = Path(spark_jobs.__file__).resolve().parent / "jvm_warmup.py"


def spark_home() -> Path:
    """The Spark that spark-submit runs: ``$SPARK_HOME`` when set (pyspark's ``spark-submit`` honours it),
    else pyspark's own folder, found without importing pyspark (the command line never does)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    spec = importlib.util.find_spec("pyspark")
    return Path(next(iter(spec.submodule_search_locations)))


def spark_jars() -> Path:
    return spark_home() / "jars"


def java_binary() -> str:
    """The Java that spark-submit runs (``bin/spark-class``): ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    return f"{home}/bin/java" if home else "java"


def archive_path(folder: Path, options: str = "") -> Path:
    """The archive for this installation and JVM ``options`` in ``folder``. A JVM checks that the jars are
    the files the archive was made from (size and modification time): a reinstall gets an archive of its
    own rather than one every JVM would refuse."""
    quiet = {k: v for k, v in os.environ.items() if k not in JVM_OPTION_VARS}  # else their lines are in the output
    java = subprocess.run([java_binary(), "-version"], capture_output=True, text=True, env=quiet).stderr
    jars = sorted(spark_jars().glob("*.jar"))
    stamps = "|".join(f"{j.name}:{j.stat().st_size}:{j.stat().st_mtime_ns}" for j in jars)
    launch = "|".join(f"{var}={os.environ.get(var, '')}" for var in (*JVM_OPTION_VARS[1:], *LAUNCH_VARS))
    key = (f"{importlib.metadata.version('pyspark')}|{spark_jars()}|{java}|{sys.executable}|{options}|{stamps}"
           f"|{launch}|{_defaults_digest()}")
    return folder / f"spark-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def _defaults_digest() -> str:
    """Spark's defaults file can put folders on the driver's class path (``spark.driver.extraClassPath``)."""
    conf = Path(os.environ.get("SPARK_CONF_DIR") or spark_home() / "conf") / "spark-defaults.conf"
    try:
        return hashlib.sha256(conf.read_bytes()).hexdigest()[:16]
    except OSError:
        return "none"


def _own_sharing() -> str | None:
    """The variable whose JVM options choose class sharing themselves, if one does."""
    return next((var for var in JVM_OPTION_VARS if OWN_SHARING.search(os.environ.get(var, ""))), None)


def wanted(settings: Settings) -> Path | None:
    """The archive runs of ``settings`` map, existing or not; None when it is off or cannot be had (a
    folder that cannot be made, no Java to ask: said in one line, as only speed depends on it)."""
    where = os.environ.get(ARCHIVE_ENV) or str(settings.home / "jvm")
    if where == "off" or _own_sharing() is not None:
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
    archive, or dump it (to a file of this process's own, put in place only by a run that succeeded) where
    a probe of this environment says a JVM can (``refusal``). That call says whether it put an archive in
    place (``dumping``)."""
    path = wanted(settings)
    if path is None:
        return "", lambda _code: False
    if path.exists():
        return f"-XX:SharedArchiveFile={path} {QUIET}", lambda _code: False
    refused = path.with_suffix(".refused")
    if refused.exists():
        return "", lambda _code: False
    why = refusal(settings.spark_master, path.with_suffix(f".{os.getpid()}.probe"))
    if why is not None:
        print(f"no archive of Spark's classes here ({why}): runs load them one by one", flush=True)
        try:
            refused.write_text(why + "\n")
        except OSError:
            pass  # a folder it cannot write to: the next run probes again
        return "", lambda _code: False
    print(f"first run of this installation: Spark's classes are saved to {path} as it ends (once; later runs "
          "start faster)", flush=True)
    return dumping(path)


def refusal(master: str, probe: Path) -> str | None:
    """Why a driver JVM that spark-submit would start here for ``master`` cannot dump an archive (a line),
    or None when it can: Spark's launcher builds the driver's command, then a JVM of its class path and
    options (the environment's too) dumps to ``probe`` as it exits, which is removed."""
    env = {**os.environ, "SPARK_HOME": str(spark_home())}
    dump = f"-XX:ArchiveClassesAtExit={probe} {QUIET}"
    try:
        launched = subprocess.run(
            ["bash", "-c", LAUNCHER, "spark-class", "-Xmx128m", "-cp", f"{spark_jars()}/*",
             "org.apache.spark.launcher.Main", "org.apache.spark.deploy.SparkSubmit", "--master", master,
             "--driver-java-options", dump, "probe.py"],
            env=env, capture_output=True, timeout=120)
        command = [part.decode() for part in launched.stdout.split(b"\0") if part]
        if launched.returncode != 0 or "-cp" not in command or "org.apache.spark.deploy.SparkSubmit" not in command:
            return f"Spark's launcher failed: {_last_line(launched.stderr) or f'exit code {launched.returncode}'}"
        class_path = command[command.index("-cp") + 1]
        for entry in class_path.split(os.pathsep):
            folder = Path(entry)
            if entry and not entry.endswith("*") and folder.is_dir() and any(folder.iterdir()):
                return f"{entry} is on Spark's class path and is not empty"
        options = command[command.index("-cp") + 2:command.index("org.apache.spark.deploy.SparkSubmit")]
        # the launcher's own main class, run with the driver's class path and options, exits at once
        probed = subprocess.run(
            ["bash", "-c", LAUNCHER, "spark-class", "-cp", class_path, *options, "org.apache.spark.launcher.Main",
             "org.apache.spark.deploy.SparkSubmit", "--version"], env=env, capture_output=True, timeout=120)
        if probed.returncode != 0 or not probe.exists():
            said = _last_line(probed.stderr) or f"exit code {probed.returncode}, no archive written"
            return f"a JVM of this environment could not save them: {said}"
        return None
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not ask Spark's launcher: {exc}"
    finally:
        _remove(probe)


def _remove(path: Path) -> None:
    """Remove ``path`` if it is there; a read-only folder raises even for a file that is not (EROFS)."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _last_line(output: bytes) -> str:
    """The last line of a JVM's output that says something (not the JVM's notes on picked-up options)."""
    lines = [line.strip() for line in output.decode(errors="replace").splitlines()]
    said = [line for line in lines if line and not line.startswith(("Picked up ", "WARNING: Using incubator"))]
    return said[-1][:300] if said else ""


def dumping(path: Path) -> tuple[str, Callable[[int], bool]]:
    """JVM options that dump the archive ``path`` as the JVM exits, to a file of this process's own, and what
    to call with the application's exit code: puts the dump in place if it succeeded and left one, else
    removes it; True once the archive is in place."""
    dump = path.with_suffix(f".{os.getpid()}.tmp")

    def done(code: int) -> bool:
        if code == 0 and dump.exists():
            put_in_place(dump, path)
            return True
        _remove(dump)
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
