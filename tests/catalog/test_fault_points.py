"""Every named fault point: the wordcount loop runs with segments landing, the process dies at
that point, then the job resumes and runs on to the end. The sink must equal an independent
recount of all input: the checker reports lost = 0 and duplicated = 0.

How the process dies, per point:

- ``sigkill``: the command is started as a user starts it (`absreplay inject|finalize|process`)
  and its whole process group is SIGKILLed at the point, the Spark JVM with it. `inject` and
  `finalize` start no JVM, so this is cheap; `snapshot.after_ack` is the real SIGKILL of a
  spark-submit'ed `process` (k of N acks written).
- ``crash``: the command runs in this process on the shared SparkSession, and the point raises
  ProcessCrash: nothing handles it, the snapshot writer stops, the catalog and state root are
  left as a kill there leaves them (tests/runs/test_random_kills.py SIGKILLs real `recover` runs).

Points reached by `process` resume with `absreplay process` (from the last completed
checkpoint, the killed one stays PENDING); the others with `recover` (`run_recovery`, the code
`absreplay recover` runs in its application).
"""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from absreplay_examples.definitions import wordcount
from coordinator.checkpoints.policy import CheckpointPolicy
from coordinator.modes import RecoveryKind, RecoveryMode, RecoveryRequest
from coordinator.faults import POINTS
from tests.servers.test_kafka_sink import STEPS as KAFKA_SINK_STEPS
from tests.helpers import cli_ok, crash, kill_when, lost_and_duplicated, make_workspace, start

pytestmark = pytest.mark.spark

# fault point (armed for checkpoint 3, the first in flight) -> the command that reaches it, how it dies
CASES = {
    "inject.after_cut": (["inject", "wordcount"], "sigkill"),
    "epoch.compute": (["process", "wordcount"], "crash"),
    "snapshot.before_ack": (["process", "wordcount"], "crash"),
    "snapshot.after_ack": (["process", "wordcount"], "sigkill"),  # after 1 of the 2 subtask groups' acks
    "finalize.before_commit": (["finalize", "wordcount"], "sigkill"),
    "sink.mid_commit": (["finalize", "wordcount"], "sigkill"),
    "gc.before_delete": (["finalize", "wordcount"], "sigkill"),
    "recovery.restore": (["recover", "wordcount"], "crash"),
    "recovery.after_reset": (["recover", "wordcount"], "crash"),
}


def test_every_fault_point_has_a_case() -> None:
    # a Kafka sink's steps: tests/servers/test_kafka_sink.py kills finalize at each of them
    assert set(CASES) | set(KAFKA_SINK_STEPS) == POINTS


@pytest.mark.parametrize(
    "point",
    [pytest.param(p, marks=pytest.mark.heavy(seconds=35)) if CASES[p] == (["process", "wordcount"], "sigkill") else p
     for p in sorted(CASES)],
)
def test_killed_at_fault_point_then_resumed_is_exactly_once(point, tmp_path, pg_url, spark, summary) -> None:
    from spark_jobs.recover import run_recovery
    from coordinator.modes import SnapshotMode

    job = wordcount()
    if point == "gc.before_delete":
        # full snapshots and one retained checkpoint: finalizing 3 subsumes 2 and deletes its files
        job = replace(job, policy=CheckpointPolicy(retained=1, full_snapshot_every=1))
    ws = make_workspace(tmp_path, pg_url, job)
    landed = sum(ws.cycle(spark, b) for b in range(2))
    cmd, how = CASES[point]
    landed += ws.land(2, lines=2000, vocab=2000)
    if cmd[0] != "inject":
        ws.coordinator.inject()  # barrier 3
    if cmd[0] == "process":
        landed += ws.land(3, lines=2000, vocab=2000)
        ws.coordinator.inject()  # barrier 4: the run catches up two epochs and dies in the first
    if cmd[0] in ("finalize", "recover"):
        ws.run_epochs(spark)  # checkpoint 3 completed, its sink output staged
    armed = f"{point}@3/1" if point == "snapshot.after_ack" else point
    if how == "sigkill":
        # the point pauses and announces itself; the SIGKILL comes at that moment, to the whole group
        # (a point armed with `kill` kills the JVM before it relays the driver's last words)
        proc = start(ws, *cmd, faults=f"{armed}=sleep:600")
        kill_when(proc, f"ABS fault point {point}")
        assert proc.returncode == -signal.SIGKILL
    else:
        crash(ws, spark, armed, *cmd)

    if cmd[0] == "process":
        # the killed checkpoint is not completed; `process` again restores the last one that is
        assert ws.store.checkpoint(ws.job.name, 3).status == "PENDING"
        before = ws.store.latest_completed(ws.job.name).checkpoint_id
        assert before == 2
        out = cli_ok(ws, "process", "wordcount", spark=spark)
        assert f"restoring from checkpoint {before}, 2 pending epoch(s) 3..4" in out
        cli_ok(ws, "finalize", "wordcount")
    else:
        request = RecoveryRequest(RecoveryKind.RECOVER, RecoveryMode.FULL, None)
        run_recovery(spark, ws.store, ws.job, ws.settings, request, SnapshotMode.ASYNC)
    landed += sum(ws.cycle(spark, b) for b in range(4, 6))  # and on to the end
    latest = ws.store.latest_completed(ws.job.name).checkpoint_id
    expected = ws.expected_at(latest)
    lost, duplicated = lost_and_duplicated(expected, ws.committed())
    summary(f"{point} ({how}): lost={lost} duplicated={duplicated} over {sum(expected.values())} words")
    assert (lost, duplicated) == (0, 0)
    # and nothing is left out: the last checkpoint's cut covers every line that landed
    assert sum(ws.store.cut(ws.job.name, latest).values()) == landed
    for row in ws.store.history(ws.job.name):
        if row["status"] in ("COMPLETED", "SUBSUMED"):
            assert row["acked_tasks"] == row["total_tasks"], row
