"""A Spark standalone cluster whose workers behave as separate hosts, on one machine (root, Linux).

    with separate_hosts(base, workers=2) as hosts:
        hosts.run(env, "absreplay", "process", "wordcount")   # the driver, a host of its own too
        hosts.kill(1); hosts.start(1)                         # worker 1 lost with its disk, then back empty

The master listens on 127.0.0.1. Worker i has an address of its own (127.0.0.<i + 2>: Spark's
executors on it are on another host than worker j's) and runs in a mount namespace of its own
(``unshare --mount``) with a private tmpfs over its local directory (``SPARK_LOCAL_DIRS``: its
executors' block manager folders and the stores under them) and over its work directory (the
application files it fetches). A driver command runs the same way, with a private tmpfs over its own
local directory. So the hosts share exactly what separate machines would: the state root, the input,
the catalog (all under ``base``, outside the private mounts) and the installed code; each host's
local disk is its own and vanishes with it.

Every worker runs in a process group of its own: ``kill`` SIGKILLs the group (the worker JVM, its
executor JVMs and their Python workers), and its private tmpfs goes with the last process of its
namespace. Everything is stopped by group on exit, even after a failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from absreplay.commands.process_group import stop_process_group
from absreplay.commands.standalone_cluster import READY_TIMEOUT_S, StandaloneCluster, free_port

#: mount a private tmpfs over each folder given, then run the command: a host's own local disk
PRIVATE = 'for d in "$@"; do [ "$d" = -- ] && break; mount -t tmpfs tmpfs "$d"; shift; done; shift; exec "$@"'


def private(folders: list[Path], command: list[str]) -> list[str]:
    """``command`` in a mount namespace of its own, each of ``folders`` a private, empty tmpfs there."""
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", PRIVATE, "sh",
            *map(str, folders), "--", *command]


@dataclass
class SeparateHosts:
    cluster: StandaloneCluster
    base: Path
    spark_class: str
    env: dict[str, str]
    cores: int
    workers: dict[int, subprocess.Popen] = field(default_factory=dict)

    def address(self, i: int) -> str:
        return f"127.0.0.{i + 2}"

    def local_dir(self, i: int) -> Path:
        """Worker ``i``'s local directory: private to it, empty from anywhere else."""
        return self.base / f"host-{i}" / "local"

    def start(self, i: int) -> None:
        """Worker ``i``, on an empty local disk, registered with the master before this returns."""
        host = self.base / f"host-{i}"
        command = [self.spark_class, "org.apache.spark.deploy.worker.Worker", "--host", self.address(i),
                   "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", str(self.cores),
                   "--memory", "2g", "--work-dir", str(host / "work"), self.cluster.master_url]
        env = {**self.env, "SPARK_LOCAL_IP": self.address(i), "SPARK_LOCAL_DIRS": str(self.local_dir(i))}
        alive = self.cluster.alive_workers() or 0
        with (self.base / f"worker-{i}.log").open("a") as log:
            self.workers[i] = subprocess.Popen(private([self.local_dir(i), host / "work"], command), env=env,
                                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while (self.cluster.alive_workers() or 0) <= alive:
            if time.monotonic() > deadline or self.workers[i].poll() is not None:
                raise RuntimeError(f"worker {i} did not register:\n{(self.base / f'worker-{i}.log').read_text()[-3000:]}")
            time.sleep(0.5)

    def kill(self, i: int) -> None:
        """SIGKILL worker ``i``'s whole process group: the host is gone, its local disk with it."""
        proc = self.workers.pop(i)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def command(self, name: str, args: list[str]) -> list[str]:
        """``args`` as run by a driver host of its own (private local directory ``name``)."""
        return private([self.base / f"driver-{name}" / "local"], args)

    def driver_env(self, name: str) -> dict[str, str]:
        return {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_DIRS": str(self.base / f"driver-{name}" / "local"),
                "ABS_SPARK_MASTER": self.cluster.master_url}


@contextmanager
def separate_hosts(base: Path, workers: int = 2, cores: int = 1) -> Iterator[SeparateHosts]:
    from pyspark.find_spark_home import _find_spark_home

    if os.geteuid() != 0:
        raise RuntimeError("separate hosts need root: each worker mounts a private tmpfs in a namespace of its own")
    spark_class = str(Path(_find_spark_home()) / "bin" / "spark-class")
    master_port, master_ui = free_port(), free_port()
    base.mkdir(parents=True, exist_ok=True)
    cluster = StandaloneCluster(f"spark://127.0.0.1:{master_port}", f"http://127.0.0.1:{master_ui}", base / "work",
                                [base / "master.log", *(base / f"worker-{i}.log" for i in range(workers))])
    env = {**os.environ, "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    with (base / "master.log").open("w") as log:
        master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(master_port), "--webui-port", str(master_ui)],
                                  env={**env, "SPARK_LOCAL_IP": "127.0.0.1"}, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    hosts = SeparateHosts(cluster, base, spark_class, env, cores)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while cluster.alive_workers() is None:
            if time.monotonic() > deadline or master.poll() is not None:
                raise RuntimeError(f"the master did not come up:\n{cluster.log_tail()}")
            time.sleep(0.5)
        for i in range(workers):
            hosts.start(i)
        yield hosts
    finally:
        for proc in hosts.workers.values():
            stop_process_group(proc)
        stop_process_group(master)
