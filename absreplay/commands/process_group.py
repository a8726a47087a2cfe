"""Stopping a child that leads a process group: a spark-submit and its JVMs, a Spark standalone cluster's
daemons, the test servers."""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import suppress


def stop_process_group(proc: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM ``proc``'s process group (it leads one), SIGKILL it after ``grace_s``, and reap ``proc``.
    A spark-submit left running would keep the job's lease and block every later run."""
    with suppress(ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace_s)
    with suppress(ProcessLookupError):  # what ignored SIGTERM (or outlived the leader) goes now
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
