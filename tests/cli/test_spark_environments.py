"""The commands in the environments Spark and Airflow users already have: ``absreplay run`` then ``verify``
exit 0 and the sink is exact, with the archive of Spark's classes on (``ABS_JVM_ARCHIVE``), whatever the
environment lets a JVM do with it.

- ``SPARK_CONF_DIR`` with a ``spark-defaults.conf``: Spark puts that folder on the driver's class path, where a
  JVM cannot dump an archive (it failed every run as it exited): the probe says so once, runs go on without;
- ``SPARK_HOME`` set to the Spark that pyspark ships: the archive is dumped, and the next run maps it;
- ``JAVA_TOOL_OPTIONS`` with options of the user's own, and ``_JAVA_OPTIONS=-Xshare:off`` (the user chose class
  sharing themselves: the archive is left alone);
- a read-only ``ABS_HOME`` (a read-only mount in a mount namespace of its own) holding the input, the catalog
  and state elsewhere;
- a second Python first on ``PATH``, one that cannot run anything of the project.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from absreplay.commands import jvm_archive
from tests.conftest import JVM_OPTIONS
from tests.helpers import ABSREPLAY, make_workspace

ENVIRONMENTS = ["spark_conf_dir", "spark_home", "java_options", "no_sharing", "read_only_home", "second_python"]


def _environment(kind: str, tmp_path: Path, env: dict[str, str]) -> list[str]:
    """Set ``kind``'s environment in ``env``; the command prefix that runs a command in it."""
    if kind == "spark_conf_dir":
        conf = tmp_path / "spark-conf"
        conf.mkdir()
        (conf / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions 3\nspark.ui.showConsoleProgress false\n")
        env["SPARK_CONF_DIR"] = str(conf)
    elif kind == "spark_home":
        env["SPARK_HOME"] = str(jvm_archive.spark_home())
    elif kind == "java_options":
        env["JAVA_TOOL_OPTIONS"] = f"{JVM_OPTIONS} -Duser.timezone=UTC -Dfile.encoding=UTF-8"
    elif kind == "no_sharing":
        env["_JAVA_OPTIONS"] = "-Xshare:off"
    elif kind == "second_python":
        other = tmp_path / "other-python"
        other.mkdir()
        for name in ("python", "python3", "python3.11"):
            (other / name).write_text("#!/bin/sh\necho 'not the project Python' >&2\nexit 3\n")
            (other / name).chmod(0o755)
        env["PATH"] = f"{other}{os.pathsep}{env['PATH']}"
    elif kind == "read_only_home":
        home = Path(env["ABS_HOME"])
        home.mkdir(parents=True, exist_ok=True)
        # the home as a read-only mount, in a mount namespace of the command's own
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                f'mount --bind -o ro "{home}" "{home}" && exec "$@"', "sh"]
    return []


@pytest.mark.spark  # two Spark applications of their own per environment
@pytest.mark.heavy(seconds=40)
@pytest.mark.parametrize("kind", ENVIRONMENTS)
def test_run_and_verify_succeed_in_the_environments_users_have(kind, tmp_path, sqlite_url) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    archives = tmp_path / "home" / "jvm"
    # the state outside the home (a read-only home holds the input only); not the suite's archive: a JVM dumps
    # only on top of the JDK's own
    env = {**os.environ, **ws.env(), "ABS_STATE_URI": str(tmp_path / "state"), "JAVA_TOOL_OPTIONS": JVM_OPTIONS}
    env.pop(jvm_archive.ARCHIVE_ENV, None)  # the default folder, under ABS_HOME
    prefix = _environment(kind, tmp_path, env)
    if kind == "read_only_home":
        archives.mkdir(parents=True)  # an installation's folder, left from before the home was made read-only

    def command(*args: str) -> str:
        proc = subprocess.run([*prefix, ABSREPLAY, *args], env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout

    for batch in range(2):
        ws.land(batch, lines=40)
        said = command("run", "wordcount")
    assert ws.committed() == ws.expected_latest() != {}
    command("verify", "wordcount")

    made = sorted(p.name for p in archives.glob("*")) if archives.exists() else []
    if kind in ("spark_home", "java_options", "second_python"):
        assert [name for name in made if name.endswith(".jsa")], (made, said)  # dumped by the first run, mapped since
    elif kind == "spark_conf_dir":
        assert [name for name in made if name.endswith(".refused")] == made != [], made  # said once, then left off
        assert "is on Spark's class path and is not empty" in (archives / made[0]).read_text()
    else:  # the user's own class sharing; a home nothing can be written to
        assert not [name for name in made if name.endswith(".jsa")], made
