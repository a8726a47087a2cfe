"""The tests' servers (tests/servers/), each with Spark as a user's cluster would use it: a spark-submit
writes Parquet to the server and reads it back, and the files are on the server. The ground the state root
and input on object stores and HDFS stand on.

- S3 (s3proxy): with the project's JVM dependencies (jvm/pom.xml's ``spark`` profile, fetched by ``make
  jvm-deps``) as ``--jars``, the S3A file system on ``s3a://``;
- HDFS (a MiniDFSCluster): pyspark's own Hadoop client, on ``hdfs://``;
- YARN (a MiniYARNCluster over that HDFS): Spark in YARN client mode, its executor in a NodeManager's
  container (``spark-yarn`` is in the pyspark package).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.fs as pafs
import pytest

from absreplay.commands import submit
from tests.servers.hdfs import hdfs_server
from tests.servers.jvm_deps import classpath
from tests.servers.s3 import s3_server
from tests.servers.yarn import yarn_cluster

APP = """import sys
from pyspark.sql import SparkSession
s = SparkSession.builder.getOrCreate()
s.range(1000).selectExpr("id", "id % 7 AS k").write.parquet(sys.argv[1])
print("READ", s.read.parquet(sys.argv[1]).groupBy().sum("k").first()[0], s.sparkContext.master)
s.stop()
"""


def write_and_read(tmp_path, uri: str, *options: str, master: str = "local[2]", env: dict | None = None) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP)
    proc = subprocess.run(
        [submit.spark_submit_binary(), "--master", master, "--conf", "spark.ui.enabled=false", *options,
         *submit.python_confs(), str(app), uri],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})}, capture_output=True, text=True,
        timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"READ {sum(i % 7 for i in range(1000))} {master}" in proc.stdout


@pytest.mark.spark  # a Spark application of its own
@pytest.mark.heavy(seconds=40)
def test_spark_writes_and_reads_s3a_with_the_projects_jars(tmp_path) -> None:
    with s3_server(tmp_path / "s3") as s3:
        uri = f"{s3.bucket('data')}/numbers"
        confs = [arg for key, value in s3.hadoop_settings().items() for arg in ("--conf", f"{key}={value}")]
        write_and_read(tmp_path, uri, "--jars", classpath("spark").replace(os.pathsep, ","), *confs)
        written = sorted(f.base_name for f in s3.filesystem().get_file_info(pafs.FileSelector("data/numbers")))
    assert "_SUCCESS" in written and any(name.endswith(".parquet") for name in written), written


@pytest.mark.spark  # a Spark application of its own, and a minicluster
@pytest.mark.heavy(seconds=60)
def test_spark_writes_and_reads_hdfs_on_the_minicluster(tmp_path) -> None:
    with hdfs_server(tmp_path / "hdfs") as hdfs:
        write_and_read(tmp_path, hdfs.uri("/abs/numbers"))
        blocks = [p for p in (tmp_path / "hdfs" / "dfs").rglob("blk_*") if not p.name.endswith(".meta")]
    assert blocks, "no block on the DataNode's disk"


@pytest.mark.spark  # a Spark application on YARN, HDFS and YARN miniclusters
@pytest.mark.heavy(seconds=80)
def test_spark_on_yarn_writes_and_reads_hdfs(tmp_path) -> None:
    with hdfs_server(tmp_path / "hdfs") as hdfs, yarn_cluster(tmp_path / "yarn", hdfs) as yarn:
        confs = [arg for key, value in yarn.spark_confs().items() for arg in ("--conf", f"{key}={value}")]
        write_and_read(tmp_path, hdfs.uri("/abs/numbers"), "--deploy-mode", "client", "--num-executors", "1",
                       "--executor-cores", "1", "--executor-memory", "1g", *confs, master="yarn", env=yarn.env())
        containers = list((tmp_path / "yarn" / "build").rglob("container_*"))
    assert containers, "no NodeManager container ran the executor"
