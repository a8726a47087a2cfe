"""Peak resident memory of a Spark application's processes while a benchmark runs.

    with PeakMemory() as mem:
        ...                      # the measured work
    mem.peaks                    # {"driver_jvm": 612.3, "executor_jvms": 0.0, ...} in MB (2**20 bytes)

A thread samples every ``interval_s`` (0.1 s) the resident set size (RSS) of the
processes of this application, sorted into kinds:

- ``python_driver``: this Python process;
- ``driver_jvm``: the driver's JVM (``SparkSubmit``): the one pyspark's gateway started
  (a descendant of this process), or this process's parent when spark-submit started us;
  other JVMs this process started (a standalone cluster's master and workers) are not counted;
- ``executor_jvms``: a standalone cluster's executors (``CoarseGrainedExecutorBackend``)
  whose ``--driver-url`` names the port of this process's active SparkContext; another
  application's executors on the same machine are not counted;
- ``python_workers``: the Python processes those JVMs fork (``pyspark.daemon`` and its
  workers, in local mode under the driver's JVM, on a cluster under the executors).

A kind's value in one sample is the sum over its processes; ``peaks`` holds each
kind's largest value over the samples, and ``total``, the largest sum of all kinds in
one sample. ``processes`` holds, per kind, the most processes seen in one sample (0
executors in local mode). A peak is what polling saw: a spike shorter than the
interval may be missed. RSS counts pages shared with a forked child in both: the
Python workers forked by one ``pyspark.daemon`` are summed as they are (an upper
bound), while a JVM's child that has not yet exec'd (same command line) is skipped.

Where the active SparkContext's UI is on (``spark.ui.enabled``, ``ABS_SPARK_UI=true``),
``peaks`` also holds ``driver_jvm_heap`` and ``executor_jvm_heap`` (summed over executors):
the JVM heap peaks Spark's REST API reports (``peakMemoryMetrics.JVMHeapMemory``).
Those are the application's peaks since it started (sent with executor heartbeats,
every 10 s by default), not only this block's.

Processes are read with psutil when it is installed, else from /proc (Linux). Only
new processes' command lines are read, and only this application's RSS, so a sample
costs a directory listing and a few small reads.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

MB = 2**20
KINDS = ("driver_jvm", "executor_jvms", "python_workers", "python_driver")
DRIVER_MAIN = "org.apache.spark.deploy.SparkSubmit"
EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
LAUNCHER_MAIN = "org.apache.spark.launcher.Main"
SHELLS = ("bash", "sh", "dash")

try:
    import psutil
except ImportError:  # pragma: no cover - the project's venv has it (through Airflow)
    psutil = None

GONE: tuple[type[BaseException], ...] = (OSError,) + ((psutil.Error,) if psutil else ())


def _describe_psutil(pid: int) -> tuple[int, list[str]]:
    p = psutil.Process(pid)
    return p.ppid(), p.cmdline()


def _rss_psutil(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def _describe_proc(pid: int) -> tuple[int, list[str]]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    ppid = int(stat[stat.rindex(")") + 2 :].split()[1])  # the command name may hold spaces and parentheses
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    return ppid, [a for a in cmdline if a]


def _rss_proc(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _pids_proc() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


pids: Callable[[], list[int]] = psutil.pids if psutil else _pids_proc
describe: Callable[[int], tuple[int, list[str]]] = _describe_psutil if psutil else _describe_proc
rss: Callable[[int], int] = _rss_psutil if psutil else _rss_proc


def program(cmdline: list[str]) -> str:
    """The name of what a process runs (``java``, ``python3.11``, ``bash``)."""
    return os.path.basename(cmdline[0]) if cmdline else ""


def runs(cmdline: list[str], main_class: str) -> bool:
    """A JVM running ``main_class``; not the shell script nor Spark's launcher that name it on the way."""
    return program(cmdline) == "java" and main_class in cmdline and LAUNCHER_MAIN not in cmdline


def driver_url_port(cmdline: list[str]) -> int | None:
    """The port of the driver an executor's command line names (``--driver-url spark://...@host:port``)."""
    if "--driver-url" not in cmdline[:-1]:
        return None
    url = cmdline[cmdline.index("--driver-url") + 1]
    port = url.rsplit(":", 1)[-1]
    return int(port) if port.isdigit() else None


def active_context():
    """This process's active SparkContext, if pyspark is imported and one is running."""
    pyspark = sys.modules.get("pyspark")
    return getattr(pyspark.SparkContext, "_active_spark_context", None) if pyspark else None


class PeakMemory:
    """Samples this application's processes on a thread while the block runs; ``peaks`` in MB."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.peaks: dict[str, float] = dict.fromkeys((*KINDS, "total"), 0.0)
        self.processes: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.samples = 0
        self._seen: dict[int, tuple[int, list[str]]] = {}
        self._driver_port: tuple[int, int | None] | None = None  # (id of the SparkContext, its port)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="peak-memory", daemon=True)

    def __enter__(self) -> PeakMemory:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
        self.peaks.update(self.jvm_heap_peaks())

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    # -- one sample ----------------------------------------------------------------------------------
    def sample(self) -> None:
        kinds = self.classify()
        values = {}
        for kind, members in kinds.items():
            total = 0
            for pid in members:
                try:
                    total += rss(pid)
                except GONE:  # it ended between the listing and the read
                    pass
            values[kind] = total / MB
            self.processes[kind] = max(self.processes[kind], len(members))
        for kind, value in values.items():
            self.peaks[kind] = max(self.peaks[kind], value)
        self.peaks["total"] = max(self.peaks["total"], sum(values.values()))
        self.samples += 1

    def classify(self) -> dict[str, list[int]]:
        """This application's pids by kind, from the processes running now."""
        alive = set(pids())
        for pid in self._seen.keys() - alive:
            del self._seen[pid]
        # read again each time: a shell's command line (Spark's scripts exec the JVM) and a fork's
        # (it shows its parent's until it execs: a JVM starting Python or a shell command)
        again = {p for p, (_, cmd) in self._seen.items() if program(cmd) in SHELLS or self.forked_copy(p)}
        for pid in alive - self._seen.keys() | again:
            try:
                self._seen[pid] = describe(pid)
            except GONE:
                pass
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in self._seen.items():
            children.setdefault(ppid, []).append(pid)

        me = os.getpid()
        # pyspark's gateway runs spark-submit; other JVMs this process started (a standalone
        # cluster's master and workers) are not the driver
        drivers = [p for p in self.descendants(me, children)
                   if runs(self._seen[p][1], DRIVER_MAIN) and not self.forked_copy(p)]
        if not drivers and os.getppid() in self._seen and runs(self._seen[os.getppid()][1], DRIVER_MAIN):
            drivers = [os.getppid()]  # spark-submit's JVM started this Python
        port = self.driver_port()
        executors = [p for p, (_, cmd) in self._seen.items()
                     if port is not None and runs(cmd, EXECUTOR_MAIN) and driver_url_port(cmd) == port
                     and not self.forked_copy(p)]
        workers = {p for jvm in drivers + executors for p in self.descendants(jvm, children)
                   if p != me and program(self._seen[p][1]).startswith("python")}
        return {"driver_jvm": drivers, "executor_jvms": executors, "python_workers": sorted(workers),
                "python_driver": [me]}

    def forked_copy(self, pid: int) -> bool:
        """A process showing its parent's command line: forked, not (yet) exec'd. A JVM's such child
        is about to run another program and shares the JVM's pages: it is not a second JVM."""
        ppid, cmd = self._seen[pid]
        return ppid in self._seen and self._seen[ppid][1] == cmd

    @staticmethod
    def descendants(pid: int, children: dict[int, list[int]]) -> list[int]:
        found, todo = [], list(children.get(pid, []))
        while todo:
            p = todo.pop()
            found.append(p)
            todo += children.get(p, [])
        return found

    def driver_port(self) -> int | None:
        """The active SparkContext's driver port (asked once per context: it is a call into the JVM)."""
        sc = active_context()
        if sc is None:
            return None
        if self._driver_port is None or self._driver_port[0] != id(sc):
            try:
                port = sc.getConf().get("spark.driver.port")
            except Exception:  # the context is stopping: ask again next sample
                return None
            self._driver_port = (id(sc), int(port) if port else None)
        return self._driver_port[1]

    # -- the JVMs' own view --------------------------------------------------------------------------
    @staticmethod
    def jvm_heap_peaks() -> dict[str, float]:
        """JVM heap peaks from Spark's REST API, when the active context's UI is on; else nothing."""
        sc = active_context()
        try:
            url = sc.uiWebUrl if sc is not None else None
            if not url:
                return {}
            with urllib.request.urlopen(f"{url}/api/v1/applications/{sc.applicationId}/allexecutors",
                                        timeout=5) as resp:
                executors = json.load(resp)
        except Exception:  # no UI, or it is stopping: these figures are optional
            return {}
        heap = {e["id"]: (e.get("peakMemoryMetrics") or {}).get("JVMHeapMemory") for e in executors}
        peaks = {}
        if heap.get("driver") is not None:
            peaks["driver_jvm_heap"] = heap["driver"] / MB
        others = [v for k, v in heap.items() if k != "driver" and v is not None]
        if others:
            peaks["executor_jvm_heap"] = sum(others) / MB
        return peaks
