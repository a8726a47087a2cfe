"""SIGKILL the processing application in the middle of an epoch; `process` again resumes
from the last completed checkpoint and the final counts are still exact.

The application is started the way a user starts it (`absreplay process`, which
spark-submits it), in its own process group; the test kills the whole group
(the Spark JVM with it), as a lost machine would.
"""

from __future__ import annotations

import signal

import pytest

from tests.helpers import kill_when, make_workspace, run_ok, start

pytestmark = pytest.mark.spark


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
