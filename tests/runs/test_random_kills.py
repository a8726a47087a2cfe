"""Cycles with the processing application SIGKILLed at random moments, a recovery after
each: nothing lost, nothing counted twice (shown in the run's summary, and asserted).
Eight cycles in `make test`; `make soak` runs thirty (ABS_KILL_CYCLES).

Each cycle lands a batch and injects a barrier, then starts the application as a user
would after an alert: `absreplay recover wordcount` (restore the latest completed
checkpoint, or start from the sources while none has completed, settle the sinks, process
every pending epoch, finalize). Once the application says it is restoring, the test waits a
random time, up to 1.3 times what the last unkilled run took from there, and SIGKILLs its
whole process group (the Spark JVM with it) unless it has finished: kills land in epoch
computation, snapshot writes, acks, sink commits and recovery resets.
The next cycle's run is the recovery of this one's kill.

Beside the cycles, a thread keeps calling what the DAGs call, `finalize` and the
maintenance task (expiry and garbage collection), as Airflow would next to an operator's
commands. Twice a state file of the latest completed checkpoint is damaged before the run
(truncated, then deleted): from then on the runs are `recover --fallback`, which must step
back past it, abort its output if it was not committed yet, and replay its epoch. The run
right after a damage is not killed, so that a new checkpoint completes and the second
damage falls on another checkpoint than the first.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from coordinator.checkpoints.manifests import StagedOutputError
from tests.helpers import cli_ok, lost_and_duplicated, make_workspace, start

pytestmark = [pytest.mark.spark, pytest.mark.heavy(seconds=150)]
CYCLES = int(os.environ.get("ABS_KILL_CYCLES", "8"))


def run_and_maybe_kill(ws, args: list[str], delay: float) -> float | None:
    """Start the application; ``delay`` s after it starts restoring, SIGKILL it.
    Returns None if it was killed, else how long it ran after it started restoring."""
    proc = start(ws, *args)
    started = threading.Event()
    lines: list[str] = []

    def pump() -> None:
        for line in proc.stdout:
            lines.append(line)
            if "restoring from checkpoint" in line or " recover #" in line:
                started.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    while not started.wait(0.2):
        if proc.poll() is not None:  # finished (or failed) before restoring: nothing to kill
            reader.join(10)
            assert proc.returncode == 0, "".join(lines)
            return 0.0
    t0 = time.monotonic()
    try:
        proc.wait(delay)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
        return None
    reader.join(10)
    assert proc.returncode == 0, "".join(lines)
    return time.monotonic() - t0


def damage_latest_state_file(ws, how: str) -> int:
    """Truncate or delete a state file of the latest completed checkpoint; returns its id."""
    latest = ws.store.latest_completed(ws.job.name).checkpoint_id
    ack = next(a for a in ws.store.acks(ws.job.name, latest) if a.operator == ws.job.state_operator and a.state_uri)
    victim = next(Path(ack.state_uri.removeprefix("file:")).glob("*.parquet"))
    if how == "truncate":
        victim.write_bytes(victim.read_bytes()[:100])
    else:
        victim.unlink()
    return latest


def beside_the_runs(ws, stop: threading.Event, damaged: set[int], problems: list[str]) -> None:
    """What the DAGs do next to an operator's commands: finalize and maintenance, over and over."""
    from absreplay.airflow import orchestration

    while not stop.wait(0.3):
        for step in (orchestration.finalize_checkpoints, orchestration.maintain_job):
            try:
                step(ws.settings, "wordcount")
            except StagedOutputError as exc:
                if exc.checkpoint_id not in damaged:  # refusing a damaged checkpoint is the point
                    problems.append(f"{step.__name__}: {exc}")
            except Exception as exc:  # noqa: BLE001 - every other failure is a finding
                problems.append(f"{step.__name__}: {exc.__class__.__name__}: {exc}")


@pytest.mark.timeout(1800)  # thirty Spark applications take about 8 minutes on an idle 2-core machine
def test_random_sigkills_lose_nothing_and_duplicate_nothing(tmp_path, pg_url, spark, summary) -> None:
    rng = random.Random(20261121)
    ws = make_workspace(tmp_path, pg_url)
    landed = kills = 0
    typical = None  # how long an unkilled run took after it started restoring: kills fall inside that
    damage = {CYCLES // 3: "truncate", 2 * CYCLES // 3: "delete"}
    damaged: set[int] = set()
    problems: list[str] = []
    stop = threading.Event()
    finalizer = threading.Thread(target=beside_the_runs, args=(ws, stop, damaged, problems), daemon=True)
    finalizer.start()
    args = ["recover", "wordcount"]
    try:
        for cycle in range(CYCLES):
            landed += ws.land(cycle, lines=300)
            ws.coordinator.inject()
            delay = 600 if typical is None else rng.uniform(0.0, 1.3 * typical)
            if cycle in damage and ws.store.latest_completed(ws.job.name):
                damaged.add(damage_latest_state_file(ws, damage[cycle]))
                args = ["recover", "wordcount", "--fallback"]
                delay = 600  # this run steps back and completes a checkpoint: the next damage hits another one
            ran = run_and_maybe_kill(ws, args, delay)
            if ran is None:
                kills += 1
            else:
                typical = max(ran, 1.0)
    finally:
        stop.set()
        finalizer.join(120)
    # the recovery of the last cycle, on the test's session: no more Spark application to start
    cli_ok(ws, *args, spark=spark)
    latest = ws.store.latest_completed(ws.job.name).checkpoint_id
    expected = ws.expected_at(latest)
    lost, duplicated = lost_and_duplicated(expected, ws.committed())
    summary(f"{CYCLES} cycles, {kills} SIGKILLs of spark-submit, state files of checkpoints {sorted(damaged)} "
            f"damaged, finalize and maintenance alongside, {sum(expected.values())} words: "
            f"lost={lost} duplicated={duplicated}")
    assert problems == []
    assert len(damaged) == 2
    assert sum(ws.store.cut(ws.job.name, latest).values()) == landed  # every landed line is in the last cut
    assert (lost, duplicated) == (0, 0)
    assert CYCLES // 3 <= kills < CYCLES, f"{kills} of {CYCLES} runs were killed: the test did not test much"
    # a killed recovery stays RUNNING until the next one marks it FAILED (interrupted)
    with ws.store.engine.connect() as c:
        results = c.execute(text("SELECT result FROM recoveries WHERE job = 'wordcount' ORDER BY id")).scalars().all()
    assert results[-1] == "SUCCEEDED" and set(results) <= {"SUCCEEDED", "FAILED"}
