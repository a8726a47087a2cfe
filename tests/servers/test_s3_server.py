"""The project's JVM dependencies (jvm/pom.xml, fetched by ``make jvm-deps``) give Spark the S3A file system,
against the tests' S3 server (tests/servers/s3.py): a spark-submit with them as ``--jars`` writes Parquet
to ``s3a://`` and reads it back, and the objects are on the server. The ground the state root and input
on object stores stand on."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from absreplay.commands import submit
from tests.servers.s3 import classpath, s3_server

APP = """import sys
from pyspark.sql import SparkSession
s = SparkSession.builder.getOrCreate()
s.range(1000).selectExpr("id", "id % 7 AS k").write.parquet(sys.argv[1])
print("READ", s.read.parquet(sys.argv[1]).groupBy().sum("k").first()[0])
s.stop()
"""


@pytest.mark.spark  # a Spark application of its own
@pytest.mark.heavy(seconds=40)
def test_spark_writes_and_reads_s3a_with_the_projects_jars(tmp_path) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP)
    with s3_server(tmp_path / "s3") as s3:
        uri = f"{s3.bucket('data')}/numbers"
        confs = [arg for key, value in s3.hadoop_settings().items() for arg in ("--conf", f"{key}={value}")]
        proc = subprocess.run(
            [submit.spark_submit_binary(), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
             "--jars", classpath("spark").replace(os.pathsep, ","), *confs, *submit.python_confs(), str(app), uri],
            env={**os.environ, "PYSPARK_PYTHON": sys.executable}, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert f"READ {sum(i % 7 for i in range(1000))}" in proc.stdout
        written = sorted(p.name for p in (s3.root / "data" / "numbers").iterdir())
    assert "_SUCCESS" in written and any(name.endswith(".parquet") for name in written), written
