"""Every named fault point: the wordcount loop runs with segments landing, the fault kills the
process at that point (SIGKILL of its whole process group, the Spark JVM with it), then the
job is recovered and runs on to the end. The sink must equal an independent recount of all
input: the checker reports lost = 0 and duplicated = 0.

The faulted command is started as a user starts it (`absreplay inject|process|finalize|recover`);
the recovery that follows is `run_recovery`, the code `absreplay recover` runs in its
application, in this test process's Spark session (tests/test_recovery_cli.py runs it as typed).
"""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from coordinator.faults import POINTS
from coordinator.jobs import wordcount
from coordinator.policy import CheckpointPolicy
from coordinator.recovery import RecoveryKind, RecoveryMode, RecoveryRequest
from tests.helpers import kill_when, lost_and_duplicated, make_workspace, start

pytestmark = pytest.mark.spark

# fault point (armed for checkpoint 3, the one in flight), the command that reaches it
CASES = {
    "inject.after_cut": ["inject", "wordcount"],
    "epoch.compute": ["process", "wordcount"],
    "snapshot.before_ack": ["process", "wordcount"],
    "snapshot.after_ack": ["process", "wordcount"],  # after 1 of the 2 subtask groups' acks
    "finalize.before_commit": ["finalize", "wordcount"],
    "sink.mid_commit": ["finalize", "wordcount"],
    "gc.before_delete": ["finalize", "wordcount"],
    "recovery.restore": ["recover", "wordcount"],
    "recovery.after_reset": ["recover", "wordcount"],
}


def test_every_fault_point_has_a_case() -> None:
    assert set(CASES) == POINTS


@pytest.mark.parametrize("point", sorted(CASES))
def test_killed_at_fault_point_then_recovered_is_exactly_once(point, tmp_path, pg_url, spark) -> None:
    from spark_jobs.recover import run_recovery
    from spark_jobs.snapshot import SnapshotMode

    job = wordcount()
    if point == "gc.before_delete":
        # full snapshots and one retained checkpoint: finalizing 3 subsumes 2 and deletes its files
        job = replace(job, policy=CheckpointPolicy(retained=1, full_snapshot_every=1))
    ws = make_workspace(tmp_path, pg_url, job)
    landed = sum(ws.cycle(spark, b) for b in range(2)) + ws.land(2)
    cmd = CASES[point]
    if cmd[0] != "inject":
        ws.coordinator.inject()  # barrier 3
    if cmd[0] in ("finalize", "recover"):
        ws.run_epochs(spark)  # checkpoint 3 completed, its sink output staged
    armed = f"{point}@3/1" if point == "snapshot.after_ack" else point
    # the point pauses and announces itself; the SIGKILL comes at that moment, to the whole group
    # (a point armed with `kill` kills the JVM before it relays the driver's last words)
    proc = start(ws, *cmd, faults=f"{armed}=sleep:600")
    kill_when(proc, f"ABS fault point {point}")
    assert proc.returncode == -signal.SIGKILL

    request = RecoveryRequest(RecoveryKind.RECOVER, RecoveryMode.FULL, None)
    run_recovery(spark, ws.store, ws.job, ws.settings, request, SnapshotMode.ASYNC)
    landed += sum(ws.cycle(spark, b) for b in range(3, 5))  # and on to the end
    latest = ws.store.latest_completed(ws.job.name).checkpoint_id
    expected = ws.expected_at(latest)
    lost, duplicated = lost_and_duplicated(expected, ws.committed())
    print(f"{point}: lost={lost} duplicated={duplicated} over {sum(expected.values())} words")
    assert (lost, duplicated) == (0, 0)
    # and nothing is left out: the last checkpoint's cut covers every line that landed
    assert sum(ws.store.cut(ws.job.name, latest).values()) == landed
