"""YARN for the tests: a MiniYARNCluster (one ResourceManager, NodeManagers in one JVM) from Hadoop's
minicluster artifact, started by the small launcher ``tests/servers/MiniYarn.java`` (compiled by ``make
jvm-deps``) on free ports, its default file system an HDFS of ``tests/servers/hdfs.py``.

    with hdfs_server(tmp / "hdfs") as hdfs, yarn_cluster(tmp / "yarn", hdfs) as yarn:
        env = {**os.environ, **yarn.env()}      # HADOOP_CONF_DIR: spark-submit --master yarn finds it there

The cluster's whole configuration is written to ``<conf_dir>/yarn-site.xml`` as a YARN client reads it.
It runs in a process group of its own and is stopped by group, even after a failure.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from absreplay.commands.process_group import stop_process_group
from absreplay.commands import jvm_archive
from tests.servers.hdfs import HdfsServer
from tests.servers.jvm_deps import CLASSPATHS, classpath

READY_TIMEOUT_S = 180


@dataclass
class YarnCluster:
    conf_dir: Path

    def env(self) -> dict[str, str]:
        return {"HADOOP_CONF_DIR": str(self.conf_dir)}

    def spark_confs(self) -> dict[str, str]:
        """What a spark-submit to this cluster needs beyond ``--master yarn``: Spark's jars from this host
        (``local:``, on every NodeManager at the same path: no upload of them per application)."""
        return {"spark.yarn.jars": f"local:{jvm_archive.spark_jars()}/*"}


@contextmanager
def yarn_cluster(base: Path, hdfs: HdfsServer, node_managers: int = 1, own_host: bool = False
                 ) -> Iterator[YarnCluster]:
    """A MiniYARNCluster over ``hdfs``, its files under ``base``; stopped on exit. ``own_host``: the cluster
    (its NodeManagers' local folders, and so its containers' working folders) in a mount namespace of its
    own with a private tmpfs over them, as on a host of its own (``tests.state.separate_hosts.private``)."""
    from tests.state.separate_hosts import private

    conf_dir = base / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    site = conf_dir / "yarn-site.xml"
    log = base / "yarn.log"
    launcher = CLASSPATHS / "classes"
    if not (launcher / "MiniYarn.class").exists():
        raise RuntimeError(f"{launcher}/MiniYarn.class is missing: `make jvm-deps` compiles it")
    with log.open("wb") as out:
        command = ["java", f"-Dtest.build.data={base / 'build'}", "-cp",
                   f"{launcher}{os.pathsep}{classpath('minicluster')}", "MiniYarn", str(site), hdfs.uri(),
                   str(node_managers)]
        proc = subprocess.Popen(private([base / "build"], command) if own_host else command,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not site.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"the YARN minicluster exited with {proc.returncode}: {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"YARN was not up in {READY_TIMEOUT_S} s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield YarnCluster(conf_dir)
    finally:
        stop_process_group(proc)
