"""An S3-compatible server for the tests: s3proxy (Apache 2.0, from Maven Central through ``jvm/pom.xml``'s
``s3proxy`` profile), serving a folder of this machine on a free loopback port.

    with s3_server(tmp_path / "s3") as s3:
        s3.bucket("data")                       # a bucket is a folder of the server's
        spark_confs = s3.hadoop_settings()      # fs.s3a.* for Spark, as a user's cluster would set them

s3proxy rather than MinIO (AGPL, and not served by the registries here) or moto (a Python mock whose
server is slower and implements S3 from its documentation, not for a JVM's S3A client). Its filesystem
store keeps each object as a file, so the tests can look at what a run wrote. The server runs in a
process group of its own and is stopped by group, even after a failure.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from absreplay.airflow.orchestration import stop_process_group
from absreplay.commands.standalone_cluster import free_port
from tests.servers.jvm_deps import classpath

IDENTITY, CREDENTIAL = "abs-test", "abs-test-secret"
READY_TIMEOUT_S = 60


@dataclass
class S3Server:
    endpoint: str
    root: Path

    def bucket(self, name: str) -> str:
        """Make bucket ``name`` (a folder of the filesystem store); its ``s3a://`` URI."""
        (self.root / name).mkdir(parents=True, exist_ok=True)
        return f"s3a://{name}"

    def hadoop_settings(self) -> dict[str, str]:
        """The S3A settings a Spark application needs for this server, as ``spark.hadoop.*`` confs. Bulk
        deletes are off: the SDK signs them with a checksum header that s3proxy refuses (many S3-compatible
        stores do), so S3A deletes object by object."""
        return {f"spark.hadoop.fs.s3a.{key}": value for key, value in {
            "endpoint": self.endpoint, "endpoint.region": "us-east-1", "path.style.access": "true",
            "connection.ssl.enabled": "false", "access.key": IDENTITY, "secret.key": CREDENTIAL,
            "multiobjectdelete.enable": "false",
        }.items()}


@contextmanager
def s3_server(base: Path) -> Iterator[S3Server]:
    """s3proxy on a free loopback port, storing under ``base``; stopped on exit."""
    root = base / "objects"
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    properties = base / "s3proxy.properties"
    properties.write_text("\n".join([
        f"s3proxy.endpoint={endpoint}", "s3proxy.authorization=aws-v2-or-v4",
        f"s3proxy.identity={IDENTITY}", f"s3proxy.credential={CREDENTIAL}",
        "jclouds.provider=filesystem", f"jclouds.filesystem.basedir={root}", ""]))
    log = base / "s3proxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["java", "-DLOG_LEVEL=warn", "-cp", classpath("s3proxy"), "org.gaul.s3proxy.Main",
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
        yield S3Server(endpoint, root)
    finally:
        stop_process_group(proc)
