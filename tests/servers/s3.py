"""An S3-compatible server for the tests: s3proxy (Apache 2.0, from Maven Central through ``jvm/pom.xml``'s
``s3proxy`` profile), on a free loopback port, its objects in its memory.

    with s3_server(tmp_path / "s3") as s3:
        s3.bucket("data")                       # s3a://data
        spark_confs = s3.hadoop_settings()      # fs.s3a.* for Spark, as a user's cluster would set them

s3proxy rather than MinIO (AGPL, and not served by the registries here) or moto (a Python mock whose
server is slower and implements S3 from its documentation, not for a JVM's S3A client). Its in-memory
store (jclouds' ``transient``) rather than its filesystem store: that one lists no empty folder marker, so
S3A finds no ``_temporary/0`` for a write of no rows, where S3 itself lists it. The tests look at what a run
wrote through the server (``S3Server.filesystem``). The server runs in a process group of its own and is
stopped by group, even after a failure.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from absreplay.commands.process_group import stop_process_group
from absreplay.commands.standalone_cluster import free_port
from tests.servers.jvm_deps import classpath

IDENTITY, CREDENTIAL = "abs-test", "abs-test-secret"
READY_TIMEOUT_S = 60


#: s3proxy's own warnings to its output, and one line per request it serves (its handler's debug log) to a
#: file of their own: what the tests and the benchmark count
LOGGING = """<configuration>
  <appender name="out" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %-5level %logger - %msg%n</pattern></encoder>
  </appender>
  <appender name="requests" class="ch.qos.logback.core.FileAppender">
    <file>{requests}</file>
    <encoder><pattern>%msg%n</pattern></encoder>
  </appender>
  <logger name="org.gaul.s3proxy.S3ProxyHandler" level="DEBUG" additivity="false">
    <appender-ref ref="requests"/>
  </logger>
  <root level="WARN"><appender-ref ref="out"/></root>
</configuration>
"""


#: a request in the handler's log: its method and its key (nothing after the bucket: a bucket's request)
REQUEST = re.compile(r"^request: Request\((\w+) https?://[^/]+/[^/?]+/?([^?)]*)")


@dataclass
class S3Server:
    endpoint: str
    #: the server's log of the requests it served (``requests``)
    request_log: Path

    def bucket(self, name: str) -> str:
        """Make bucket ``name`` (a folder of the filesystem store); its ``s3a://`` URI."""
        self.filesystem(allow_bucket_creation=True).create_dir(name)
        return f"s3a://{name}"

    def filesystem(self, **options) -> pafs.S3FileSystem:
        """A client of the server's, to look at what a run wrote."""
        os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
        os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")
        return pafs.S3FileSystem(access_key=IDENTITY, secret_key=CREDENTIAL, endpoint_override=self.endpoint,
                                 scheme="http", region="us-east-1", **options)

    def hadoop_settings(self) -> dict[str, str]:
        """The S3A settings a Spark application needs for this server, as ``spark.hadoop.*`` confs. Bulk
        deletes are off: the SDK signs them with a checksum header that s3proxy refuses (many S3-compatible
        stores do), so S3A deletes object by object."""
        return {f"spark.hadoop.fs.s3a.{key}": value for key, value in {
            "endpoint": self.endpoint, "endpoint.region": "us-east-1", "path.style.access": "true",
            "connection.ssl.enabled": "false", "access.key": IDENTITY, "secret.key": CREDENTIAL,
            "multiobjectdelete.enable": "false",
        }.items()}


    def requests(self) -> Counter[str]:
        """The requests the server has served so far, by kind: LIST (a GET of a bucket), GET, HEAD, PUT (parts
        of a multipart upload too), POST (a multipart upload's start and end, a bulk delete), DELETE."""
        counts: Counter[str] = Counter()
        for line in self.request_log.read_text().splitlines():
            m = REQUEST.match(line)
            if m:
                method, key = m.group(1), m.group(2)
                counts["LIST" if method == "GET" and not key else method] += 1
        return counts

    def spark_conf_dir(self, folder: Path) -> Path:
        """A Spark configuration folder (``SPARK_CONF_DIR``) for this server, as a cluster's administrator
        writes it: the project's S3A jars in ``spark.jars`` and the S3A settings. The coordinator reads the
        same file (``coordinator.storage.hadoop_conf``)."""
        folder.mkdir(parents=True, exist_ok=True)
        confs = {"spark.jars": classpath("spark").replace(os.pathsep, ","), **self.hadoop_settings()}
        (folder / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in confs.items()))
        return folder


@contextmanager
def s3_server(base: Path) -> Iterator[S3Server]:
    """s3proxy on a free loopback port, its configuration and log under ``base``; stopped on exit."""
    base.mkdir(parents=True, exist_ok=True)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    properties = base / "s3proxy.properties"
    properties.write_text("\n".join([
        f"s3proxy.endpoint={endpoint}", "s3proxy.authorization=aws-v2-or-v4",
        f"s3proxy.identity={IDENTITY}", f"s3proxy.credential={CREDENTIAL}",
        "jclouds.provider=transient", ""]))
    log, requests = base / "s3proxy.log", base / "requests.log"
    logging = base / "logback.xml"
    logging.write_text(LOGGING.format(requests=requests))
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["java", f"-Dlogback.configurationFile={logging}", "-cp", classpath("s3proxy"), "org.gaul.s3proxy.Main",
             "--properties", str(properties)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"s3proxy exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"s3proxy did not listen on {port} in {READY_TIMEOUT_S} s") from None
                time.sleep(0.2)
        yield S3Server(endpoint, requests)
    finally:
        stop_process_group(proc)
