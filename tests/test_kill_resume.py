"""SIGKILL the processing application in the middle of an epoch; `process` again resumes
from the last completed checkpoint and the final counts are still exact.

The application is started the way a user starts it (`absreplay process`, which
spark-submits it), in its own process group; the test kills the whole group
(the Spark JVM with it), as a lost machine would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers import make_workspace

pytestmark = pytest.mark.spark
ABSREPLAY = str(Path(sys.executable).parent / "absreplay")


def start(ws, *args: str, faults: str = "") -> subprocess.Popen:
    env = {**os.environ, **ws.env(), "ABS_SPARK_MASTER": "local[2]", "ABS_FAULTS": faults}
    return subprocess.Popen(
        [ABSREPLAY, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )


def kill_when(proc: subprocess.Popen, marker: str, timeout: float = 240) -> str:
    """Read the output until ``marker`` appears, then SIGKILL the process group."""
    seen: list[str] = []
    found = threading.Event()

    def pump() -> None:
        for line in proc.stdout:
            seen.append(line)
            if marker in line:
                found.set()

    threading.Thread(target=pump, daemon=True).start()
    assert found.wait(timeout), f"never reached {marker!r}:\n{''.join(seen[-40:])}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    return "".join(seen)


def run_ok(ws, *args: str) -> str:
    proc = start(ws, *args)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    return out


@pytest.mark.parametrize(
    "fault_point, killed_checkpoint",
    [("epoch.compute@3", 3), ("snapshot.before_ack@2", 2)],
    ids=["mid-epoch", "state-written-before-ack"],
)
def test_sigkill_then_process_again_is_exact(tmp_path, pg_url, fault_point, killed_checkpoint) -> None:
    ws = make_workspace(tmp_path, pg_url)
    for b in range(4):
        ws.land(b, lines=2000, vocab=2000)
        ws.coordinator.inject()
    # the fault point only pauses; the kill comes from outside, at that moment
    proc = start(ws, "process", "wordcount", faults=f"{fault_point}=sleep:600")
    out = kill_when(proc, f"ABS fault point {fault_point}")
    assert proc.returncode == -signal.SIGKILL
    killed = ws.store.checkpoint(ws.job.name, killed_checkpoint)
    assert killed.status == "PENDING", out
    before = ws.store.latest_completed(ws.job.name)
    assert before is None or before.checkpoint_id < killed_checkpoint

    out = run_ok(ws, "process", "wordcount")
    assert f"restoring from checkpoint {before.checkpoint_id if before else 'none'}" in out
    run_ok(ws, "finalize", "wordcount")
    assert ws.store.latest_completed(ws.job.name).checkpoint_id == 4
    assert ws.committed() == ws.expected_at(4)
    for row in ws.store.history(ws.job.name):
        assert row["acked_tasks"] == row["total_tasks"]
