"""`verify`: recompute a checkpoint from the sources alone and compare with the stored snapshot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.errors import CheckpointNotFoundError
from coordinator.lifecycle import FailureReason
from tests.helpers import make_workspace

pytestmark = pytest.mark.spark
ABSREPLAY = str(Path(sys.executable).parent / "absreplay")


def test_verify_equal_then_differences_when_a_source_changed(tmp_path, pg_url, spark) -> None:
    from spark_jobs.verify import verify

    ws = make_workspace(tmp_path, pg_url)
    for b in range(3):
        ws.cycle(spark, b)
    for checkpoint in (2, 3):
        report = verify(spark, ws.store, ws.job, ws.settings, checkpoint)
        assert report.equal, report
        assert report.stored_rows == report.recomputed_rows == len(ws.expected_at(checkpoint))
    # a segment before the cut is rewritten behind the catalog's back (segments must be immutable)
    seg = sorted((ws.input_dir / "p0").iterdir())[0]
    seg.write_text(seg.read_text().replace("w1 ", "zzz_new "))
    report = verify(spark, ws.store, ws.job, ws.settings, None)
    assert not report.equal and report.subtasks_differing
    assert any("zzz_new" in line for line in report.differences), report.differences

    ws.land(5)
    ws.coordinator.inject()
    ws.store.fail(ws.job.name, 4, FailureReason.TASK_DECLINED, "test")
    with pytest.raises(CheckpointNotFoundError, match="is FAILED"):
        verify(spark, ws.store, ws.job, ws.settings, 4)


def test_verify_from_the_command_line(tmp_path, sqlite_url, spark) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    ws.land(0)
    ws.coordinator.inject()
    ws.run_epochs(spark)
    ws.coordinator.finalize()
    env = {**os.environ, **ws.env(), "ABS_SPARK_MASTER": "local[2]"}
    r = subprocess.run([ABSREPLAY, "verify", "wordcount"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checkpoint 1 verified" in r.stdout
    r = subprocess.run([ABSREPLAY, "verify", "wordcount", "--checkpoint", "42"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "checkpoint 42 of job 'wordcount' does not exist" in r.stderr
