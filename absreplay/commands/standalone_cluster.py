"""A Spark standalone cluster on this machine: a master and workers on 127.0.0.1, started from the
pyspark package (``spark-class``), for the cluster test and the scaling benchmark.

    with standalone_cluster(tmp, workers=2, cores=1) as cluster:
        spark = build_session("app", 2, cluster.master_url)

Every JVM runs in its own process group and is stopped by group on exit, even after a failure:
a worker's JVM and its executors outlive a killed wrapper. The master and the workers start one
at a time, each awaited (the master's JSON status counting it alive) before the next, on free
ports. Logs are ``master.log`` and ``worker-N.log`` under the given folder, and the workers'
application folders under ``work/``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from absreplay.commands.process_group import stop_process_group

READY_TIMEOUT_S = 180


def free_port() -> int:
    """A loopback port nobody listens on now (services of this machine hold the defaults)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class StandaloneCluster:
    master_url: str
    ui_url: str
    work_dir: Path
    logs: list[Path]

    def state(self) -> dict:
        """The master's JSON status (``aliveworkers``, ``activeapps``, ``completedapps``...)."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as resp:
            return json.load(resp)

    def alive_workers(self) -> int | None:
        """How many workers the master counts alive; None while it does not answer."""
        try:
            return self.state().get("aliveworkers")
        except (OSError, ValueError):  # not listening yet, or the UI answers HTML while it starts
            return None

    def log_tail(self) -> str:
        return "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text().splitlines()[-15:]) for p in self.logs)


@contextmanager
def standalone_cluster(base: Path, workers: int = 1, cores: int = 1, memory: str = "2g") -> Iterator[StandaloneCluster]:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, logging under ``base``."""
    from pyspark.find_spark_home import _find_spark_home

    spark_class = str(Path(_find_spark_home()) / "bin" / "spark-class")
    master_port, master_ui = free_port(), free_port()
    cluster = StandaloneCluster(f"spark://127.0.0.1:{master_port}", f"http://127.0.0.1:{master_ui}", base / "work",
                                [base / "master.log", *(base / f"worker-{i}.log" for i in range(workers))])
    cluster.work_dir.mkdir(parents=True)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    commands = [["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(master_port),
                 "--webui-port", str(master_ui)]]
    commands += [["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(free_port()),
                  "--webui-port", str(free_port()), "--cores", str(cores), "--memory", memory,
                  "--work-dir", str(cluster.work_dir), cluster.master_url] for _ in range(workers)]
    with ExitStack() as stack:
        for started, (command, log) in enumerate(zip(commands, cluster.logs, strict=True)):
            with log.open("w") as fh:
                proc = subprocess.Popen([spark_class, *command], env=env, stdout=fh, stderr=subprocess.STDOUT,
                                        start_new_session=True)
            stack.callback(stop_process_group, proc)  # on exit: the workers first, the master last
            deadline = time.monotonic() + READY_TIMEOUT_S
            while cluster.alive_workers() != started:  # the master answers and counts this worker
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"the standalone cluster did not come up:\n{cluster.log_tail()}")
                time.sleep(0.5)
        yield cluster
