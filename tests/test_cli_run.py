"""The command line's happy path, as a user types it: db upgrade, jobs, run --cycles, checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from absreplay.recount import recount
from absreplay.sample_data import land_batch
from coordinator.catalog.db import make_engine
from coordinator.store import CheckpointStore

pytestmark = pytest.mark.spark
ABSREPLAY = str(Path(sys.executable).parent / "absreplay")


def test_upgrade_jobs_run_cycles_and_history(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    env = {**os.environ, "ABS_HOME": str(tmp_path), "ABS_DATABASE_URL": url, "ABS_SPARK_MASTER": "local[2]"}

    def cli(*args: str) -> str:
        r = subprocess.run([ABSREPLAY, *args], env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    assert "is at revision" in cli("db", "upgrade")
    assert "wordcount" in cli("jobs")
    input_dir = tmp_path / "data" / "wordcount" / "input"
    land_batch(input_dir, 0, 300)
    out = cli("run", "wordcount", "--cycles", "2")
    assert "barrier 1 injected" in out and "committed 1;" in out
    # nothing new landed before the second barrier: an empty epoch, still a complete checkpoint
    assert "barrier 2 injected; 0 new segment(s)" in out and "committed 2;" in out
    assert "no pending epochs after checkpoint 2" in cli("process", "wordcount")
    rows = [json.loads(line) for line in cli("checkpoints", "wordcount", "--json").splitlines()]
    assert [(r["checkpoint_id"], r["status"], r["acked_tasks"]) for r in rows] == [(1, "COMPLETED", 8), (2, "COMPLETED", 8)]
    store = CheckpointStore(make_engine(url))
    with store.engine.connect() as c:
        committed = dict(c.execute(text("SELECT word, count FROM wordcount_counts")).all())
    assert committed == dict(recount(input_dir, store.cut("wordcount", 2)))
