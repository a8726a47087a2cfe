"""HDFS for the tests: a MiniDFSCluster (one NameNode, one DataNode in one JVM) from Hadoop's minicluster
artifact (``jvm/pom.xml``'s ``minicluster`` profile), started by Hadoop's own ``MiniHadoopClusterManager``
on a free loopback port, its storage under a folder of the test's.

    with hdfs_server(tmp_path / "hdfs") as hdfs:
        uri = hdfs.uri("/abs/state")            # hdfs://127.0.0.1:<port>/abs/state

pyspark's own Hadoop client (hadoop-client-api/runtime) reads and writes it: Spark needs no jar more.
The cluster runs in a process group of its own and is stopped by group, even after a failure.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from absreplay.commands.process_group import stop_process_group
from absreplay.commands.standalone_cluster import free_port
from tests.servers.jvm_deps import classpath

READY_TIMEOUT_S = 180


@dataclass
class HdfsServer:
    port: int
    #: the cluster's Hadoop configuration, as Hadoop's tools and a YARN client read it
    config: Path

    def uri(self, path: str = "/") -> str:
        return f"hdfs://127.0.0.1:{self.port}{path}"


@contextmanager
def hdfs_server(base: Path) -> Iterator[HdfsServer]:
    """A MiniDFSCluster on a free loopback port, storing under ``base``; stopped on exit."""
    base.mkdir(parents=True, exist_ok=True)
    port, details, config = free_port(), base / "details.json", base / "core-site.xml"
    log = base / "minicluster.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["java", f"-Dtest.build.data={base / 'build'}", "-cp", classpath("minicluster"),
             "org.apache.hadoop.mapreduce.MiniHadoopClusterManager", "-nomr", "-format", "-nnport", str(port),
             "-nnhttpport", "0", "-D", f"hdfs.minidfs.basedir={base / 'dfs'}",
             # a file closes once its last block is committed, without waiting for the DataNode to report it
             "-D", "dfs.namenode.file.close.num-committed-allowed=1",
             "-writeConfig", str(config), "-writeDetails", str(details)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        # the manager writes its details once the cluster is up
        while not details.exists() or not details.read_text().strip():
            if proc.poll() is not None:
                raise RuntimeError(f"the minicluster exited with {proc.returncode}: {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"HDFS was not up in {READY_TIMEOUT_S} s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        assert json.loads(details.read_text())["namenode_port"] == port
        yield HdfsServer(port, config)
    finally:
        stop_process_group(proc)
