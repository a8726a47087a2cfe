"""Where the Python of a Spark application (its driver, and in local mode its workers) imports pyspark from.

spark-submit puts Spark's ``python/lib/pyspark.zip`` and ``py4j-*-src.zip`` first on the path of the driver
and of every Python worker, and Python never caches bytecode for a module it imports from a zip: every such
process compiles the pyspark modules it uses from source again (a worker's ``import pyspark.worker``:
0.66 CPU-s from the zip, 0.14 s from the installed package on the 2-core reference machine). When this
interpreter has the very same pyspark installed (the pip package Spark came with: same ``version.py``), the
zips move behind it; otherwise (a cluster node without it, another version) the path stays as Spark made it.

Imported for this effect, first thing, by the applications' entry points (``spark_jobs/process.py``,
``spark_jobs/verify.py``) and by the local-mode worker daemon (``spark_jobs/python_daemon.py``): it must run
before anything imports pyspark. It imports nothing of pyspark itself.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import zipfile

#: the worker daemon of local-mode runs (``spark.python.daemon.module``): PySpark's, after this module
DAEMON_MODULE = "spark_jobs.python_daemon"


def daemon_confs(master: str) -> dict[str, str]:
    """Spark settings for a run on ``master``: in local mode, the workers start from ``DAEMON_MODULE``."""
    return {"spark.python.daemon.module": DAEMON_MODULE} if master.startswith("local") else {}


def _is_spark_zip(entry: str) -> bool:
    name = os.path.basename(entry)
    return name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith("-src.zip"))


def _same_file(zip_path: str, member: str, installed_dir: str) -> bool:
    try:
        with zipfile.ZipFile(zip_path) as z, open(os.path.join(installed_dir, "version.py"), "rb") as f:
            return z.read(member) == f.read()
    except (OSError, KeyError, zipfile.BadZipFile):
        return False


def prefer_installed_pyspark(path: list[str] | None = None) -> bool:
    """Move Spark's pyspark and py4j zips behind the rest of ``path`` (``sys.path``) when the installed
    pyspark and py4j are the same versions; True if it did. Does nothing once pyspark is imported."""
    path = sys.path if path is None else path
    zips = [p for p in path if _is_spark_zip(p)]
    if not zips or "pyspark" in sys.modules:
        return False
    rest = [p for p in path if not _is_spark_zip(p)]
    for package in ("pyspark", "py4j"):
        zipped = next((z for z in zips if os.path.basename(z).startswith(package)), None)
        spec = importlib.machinery.PathFinder.find_spec(package, rest)
        if zipped is None or spec is None or not spec.submodule_search_locations:
            return False
        if not _same_file(zipped, f"{package}/version.py", next(iter(spec.submodule_search_locations))):
            return False
    path[:] = rest + zips
    return True


prefer_installed_pyspark()
