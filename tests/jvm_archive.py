"""A class-data-sharing archive of Spark's classes for the JVMs the tests start.

Most of a short Spark application's start is the JVM loading and verifying Spark's
classes. JDK 17 can dump the classes one run loaded (``-XX:ArchiveClassesAtExit``)
and map them into later JVMs (``-XX:SharedArchiveFile``): on the 2-core reference
machine a spark-submit of a session plus one small job went from 12 s to 7 s.
The suite starts well over a hundred such JVMs (every ``absreplay`` command run as
a process, Airflow's spark-submits, the shared session).

The archive is made once per machine and Spark/Java/Python installation, by a
spark-submit of ``spark_jobs/jvm_warmup.py`` (``absreplay.commands.jvm_archive.make``, which
makes the demo's archive too), under the temporary directory (archives of other installations
older than a day are removed then). A JVM whose classpath does not match (Spark's
launcher, a standalone cluster's daemons) just runs without it: the archive's log
lines are off, so nothing is printed about it. Only speed depends on it: a run
without the archive computes the same.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from absreplay.commands import jvm_archive

QUIET = jvm_archive.QUIET


def archive_path(child_options: str) -> Path:
    """One archive per installation and JVM options, named as the command line names its own
    (``absreplay.commands.jvm_archive``), under the temporary directory."""
    return jvm_archive.archive_path(Path(tempfile.gettempdir()) / "absreplay-test-jvm", child_options)


def ensure(child_options: str) -> Path | None:
    """The archive, made now if missing (about 15 s); None if it could not be made (the tests then run
    without it, only slower)."""
    path = archive_path(child_options)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    from absreplay.commands import submit

    error = submit.dump_jvm_archive(path, {"JAVA_TOOL_OPTIONS": child_options})
    if error is not None:
        print(f"no JVM class archive (tests run without it): {error}")
        return None
    return path


def options(path: Path | None) -> str:
    """JVM options that use the archive (empty without one)."""
    return "" if path is None else f"-XX:SharedArchiveFile={path} {QUIET}"


if __name__ == "__main__":  # `make test` makes it beside Chromium's install, before pytest starts
    from tests.conftest import JVM_OPTIONS

    made = ensure(JVM_OPTIONS)
    print(f"test JVM class archive: {made or 'none (the tests make it again, or run without it)'}")
