"""Cycles with the processing application SIGKILLed at random moments, a recovery after
each: nothing lost, nothing counted twice (shown in the run's summary, and asserted).
Ten cycles in `make test`; `make soak` runs thirty (ABS_KILL_CYCLES).

Each cycle lands a batch and injects a barrier, then starts the application as a user
would after an alert: `absreplay recover wordcount` (restore the latest completed
checkpoint, or start from the sources while none has completed, settle the sinks, process
every pending epoch, finalize). Once the application says it is restoring, the test waits a
random time, up to 1.3 times what the last unkilled run took from there, and SIGKILLs its
whole process group (the Spark JVM with it) unless it has finished: kills land in epoch
computation, snapshot writes, acks, sink commits and recovery resets.
The next cycle's run is the recovery of this one's kill.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time

import pytest
from sqlalchemy import text

from tests.helpers import lost_and_duplicated, make_workspace, run_ok, start

pytestmark = [pytest.mark.spark, pytest.mark.heavy(seconds=150)]
CYCLES = int(os.environ.get("ABS_KILL_CYCLES", "10"))


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


@pytest.mark.timeout(1800)  # thirty Spark applications take about 8 minutes on an idle 2-core machine
def test_random_sigkills_lose_nothing_and_duplicate_nothing(tmp_path, pg_url, summary) -> None:
    rng = random.Random(20261121)
    ws = make_workspace(tmp_path, pg_url)
    landed = kills = 0
    typical = None  # how long an unkilled run took after it started restoring: kills fall inside that
    for cycle in range(CYCLES):
        landed += ws.land(cycle, lines=300)
        ws.coordinator.inject()
        delay = 600 if typical is None else rng.uniform(0.0, 1.3 * typical)
        ran = run_and_maybe_kill(ws, ["recover", "wordcount"], delay)
        if ran is None:
            kills += 1
        else:
            typical = max(ran, 1.0)
    # the recovery of the last cycle
    run_ok(ws, "recover", "wordcount")
    latest = ws.store.latest_completed(ws.job.name).checkpoint_id
    expected = ws.expected_at(latest)
    lost, duplicated = lost_and_duplicated(expected, ws.committed())
    summary(f"{CYCLES} cycles, {kills} SIGKILLs of spark-submit, {sum(expected.values())} words: "
            f"lost={lost} duplicated={duplicated}")
    assert sum(ws.store.cut(ws.job.name, latest).values()) == landed  # every landed line is in the last cut
    assert (lost, duplicated) == (0, 0)
    assert CYCLES // 3 <= kills < CYCLES, f"{kills} of {CYCLES} runs were killed: the test did not test much"
    # a killed recovery stays RUNNING until the next one marks it FAILED (interrupted)
    with ws.store.engine.connect() as c:
        results = c.execute(text("SELECT result FROM recoveries WHERE job = 'wordcount' ORDER BY id")).scalars().all()
    assert results[-1] == "SUCCEEDED" and set(results) <= {"SUCCEEDED", "FAILED"}
