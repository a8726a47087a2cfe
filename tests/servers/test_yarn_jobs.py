"""Wordcount on Spark on YARN (a MiniYARNCluster, ``tests/servers/yarn.py``) over HDFS, with hosts that share
no local folder: the YARN cluster, and so every container it runs, in a mount namespace of its own with a
private tmpfs over its NodeManager's folders; every driver command in another, with a private tmpfs over
its own home and local folders. They share HDFS (the input and the state root), the catalog (PostgreSQL)
and the installed code, as separate machines would. Spark's code and the job's reach the containers the
way YARN ships them (HDFS staging), not through a shared path.

Two epochs committed; then one executor's container is SIGKILLed while the third epoch is inside the run
(held there by a fault point's pause): the run goes on or starts over (``spark_jobs.run.executor_loss``),
else ``recover`` brings the job to the newest barrier; the sink equals an independent recount read back
from HDFS, and ``absreplay verify`` (on a local master on the driver's host) exits 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import ABSREPLAY, make_workspace
from tests.servers.hdfs import hdfs_server
from tests.servers.yarn import yarn_cluster
from tests.state.separate_hosts import private

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.xdist_group("yarn")]
EXECUTOR = "YarnCoarseGrainedExecutorBackend"


@pytest.fixture
def cluster(tmp_path):
    with hdfs_server(tmp_path / "hdfs") as hdfs, yarn_cluster(tmp_path / "yarn", hdfs, own_host=True) as yarn:
        yield hdfs, yarn


class Driver:
    """``absreplay`` commands as a driver host of their own runs them: private home and local folders."""

    def __init__(self, ws, base: Path, env: dict[str, str]) -> None:
        self.ws, self.local, self.env = ws, base / "local", env

    def start(self, *args: str, faults: str = "", master: str | None = None) -> subprocess.Popen:
        env = {**os.environ, **self.ws.env(), **self.env, "SPARK_LOCAL_DIRS": str(self.local), "ABS_FAULTS": faults,
               **({"ABS_SPARK_MASTER": master} if master else {})}
        return subprocess.Popen(private([self.local, Path(self.ws.settings.home)], [ABSREPLAY, *args]), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def ok(self, *args: str, master: str | None = None) -> str:
        proc = self.start(*args, master=master)
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, out[-4000:]
        return out


def executors(yarn_base: Path) -> list[int]:
    """The pids of the executors running in this cluster's containers."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if EXECUTOR in cmdline and str(yarn_base) in cmdline and not cmdline.startswith(("bash", "/bin/bash")):
                found.append(int(entry.name))
    return sorted(found)


def conf_dir(folder: Path, yarn) -> Path:
    """spark-defaults.conf for two executors of one core on this cluster."""
    folder.mkdir(parents=True, exist_ok=True)
    confs = {**yarn.spark_confs(), "spark.submit.deployMode": "client", "spark.executor.instances": "2",
             "spark.executor.cores": "1", "spark.executor.memory": "1g", "spark.yarn.am.memory": "512m",
             "spark.dynamicAllocation.enabled": "false"}
    (folder / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in confs.items()))
    return folder


@pytest.mark.heavy(seconds=240)
def test_wordcount_on_yarn_loses_an_executor_container_and_nothing_else(tmp_path, cluster, pg_url, summary) -> None:
    hdfs, yarn = cluster
    driver_base = tmp_path / "driver"
    ws = make_workspace(tmp_path, pg_url, env={
        "ABS_DATA_DIR": hdfs.uri("/abs/input"), "ABS_STATE_URI": hdfs.uri("/abs/state"),
        "ABS_SPARK_MASTER": "yarn", "ABS_HOME": str(driver_base / "home")})
    driver = Driver(ws, driver_base, {**yarn.env(), "SPARK_CONF_DIR": str(conf_dir(tmp_path / "spark-conf", yarn))})
    for batch in range(2):
        ws.land(batch, lines=2000)
        ws.coordinator.inject()
    t0 = time.perf_counter()
    driver.ok("process", ws.job.name)
    plain_s = time.perf_counter() - t0
    driver.ok("finalize", ws.job.name)
    assert ws.store.latest_completed(ws.job.name).checkpoint_id == 2

    ws.land(2, lines=2000)
    ws.coordinator.inject()
    t0 = time.perf_counter()
    proc = driver.start("process", ws.job.name, faults="epoch.compute@3=sleep:20")
    seen: list[str] = []
    paused = threading.Event()

    def pump() -> None:
        for line in proc.stdout:
            seen.append(line)
            if "ABS fault point epoch.compute" in line:
                paused.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    assert paused.wait(600), "".join(seen[-40:])
    pids = executors(tmp_path / "yarn")
    assert len(pids) == 2, (pids, "".join(seen[-20:]))  # one is lost, the other goes on
    os.kill(pids[0], signal.SIGKILL)
    proc.wait(timeout=900)
    reader.join(timeout=30)
    lost_s = time.perf_counter() - t0
    out = "".join(seen)
    assert proc.returncode in (0, 1), out[-4000:]

    # the run went on (commit what it acked) or failed (recover): exact either way
    driver.ok("finalize" if proc.returncode == 0 else "recover", ws.job.name)
    assert ws.store.latest_completed(ws.job.name).checkpoint_id == 3, out[-3000:]
    assert ws.committed() == ws.expected_latest()
    # verify reads only what every host shares (HDFS, the catalog): a local Spark on the driver's host will do
    assert "checkpoint 3 verified" in driver.ok("verify", ws.job.name, master="local[2]")
    restarted = out.count("starting over from the newest completed checkpoint")
    epoch = next((line.strip() for line in out.splitlines() if "] epoch 3:" in line), "")
    summary(f"wordcount on YARN over HDFS, no shared local folder: one of two executor containers "
            f"SIGKILLed inside epoch 3; that run exited {proc.returncode} after {lost_s:.0f}s (20s of it a fault point's pause; "
            f"started over {restarted} time(s); {epoch!r}), against {plain_s:.0f}s for a run of two epochs; "
            f"recovered, sink = recount, verify exit 0")
