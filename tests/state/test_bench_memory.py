"""bench/kit/memory.py sorts a process table into the kinds it reports (no Spark: a made-up table)."""

from __future__ import annotations

import os

import pytest

from bench.kit import memory
from bench.kit.memory import PeakMemory

JAVA = "/usr/lib/jvm/bin/java"
PY = "/venv/bin/python3.11"
DRIVER = [JAVA, "-cp", "jars/*", memory.DRIVER_MAIN, "pyspark-shell"]
DAEMON = [PY, "-m", "pyspark.daemon"]
MB = memory.MB


def executor(port: int) -> list[str]:
    url = f"spark://CoarseGrainedScheduler@127.0.0.1:{port}"
    return [JAVA, "-cp", "jars/*", memory.EXECUTOR_MAIN, "--driver-url", url]


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> dict[int, tuple[int, list[str], int]]:
    """pid -> (ppid, command line, RSS in MB); the sampler reads it instead of the machine's."""
    me = os.getpid()
    procs = {
        me: (1, [PY, "bench/x.py"], 100),
        10: (me, DRIVER, 500),                                     # the driver's JVM
        11: (10, DAEMON, 40), 12: (11, DAEMON, 30),                # its pyspark daemon and a forked worker
        13: (10, DRIVER, 500),                                     # the JVM forked, not yet exec'd
        20: (me, [JAVA, "org.apache.spark.deploy.worker.Worker"], 300),  # a worker this process started
        21: (20, executor(4040), 700), 22: (21, DAEMON, 50),       # our executor and its daemon
        31: (30, executor(5050), 900),                             # another application's executor
        40: (me, ["/bin/bash", "spark-class", memory.DRIVER_MAIN], 3),  # a script naming the class
    }
    monkeypatch.setattr(memory, "pids", lambda: list(procs))
    monkeypatch.setattr(memory, "describe", lambda pid: procs[pid][:2])
    monkeypatch.setattr(memory, "rss", lambda pid: procs[pid][2] * MB)
    monkeypatch.setattr(PeakMemory, "driver_port", lambda self: 4040)
    return procs


def test_kinds_are_this_applications_processes(table: dict) -> None:
    mem = PeakMemory()
    assert mem.classify() == {"driver_jvm": [10], "executor_jvms": [21], "python_workers": [11, 12, 22],
                              "python_driver": [os.getpid()]}
    mem.sample()
    assert mem.peaks == {"driver_jvm": 500, "executor_jvms": 700, "python_workers": 120, "python_driver": 100,
                         "total": 1420}


def test_a_peak_is_the_largest_sample_and_an_exec_is_seen(table: dict) -> None:
    mem = PeakMemory()
    mem.sample()
    table[11] = (10, DAEMON, 90)   # the daemon grows
    table[13] = (10, [PY, "-m", "pyspark.daemon"], 5)  # the fork exec'd Python: now a worker
    del table[21]                  # the executor is gone
    mem.sample()
    # 11, 12 and 13 (the executor's daemon 22 is no longer under a JVM of this application)
    assert mem.peaks["python_workers"] == 90 + 30 + 5
    assert mem.peaks["executor_jvms"] == 700 and mem.peaks["driver_jvm"] == 500
    assert mem.processes == {"driver_jvm": 1, "executor_jvms": 1, "python_workers": 3, "python_driver": 1}
