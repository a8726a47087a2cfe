"""The command line's happy path, as a user types it: db upgrade, jobs, run --cycles, process,
checkpoints, verify. Through the CLI's entry point in this process; the Spark applications it
would spark-submit run on the shared session (tests/catalog/test_lease.py and the kill tests start the
real `absreplay` executable)."""

from __future__ import annotations

import json

from sqlalchemy import text

from absreplay_examples.recount import recount
from absreplay_examples.sample_data import land_batch
from coordinator.catalog.db import make_engine
from coordinator.checkpoints.store import CheckpointStore
from tests.helpers import cli_ok


def test_upgrade_jobs_run_cycles_history_and_verify(tmp_path, spark) -> None:
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    env = {"ABS_HOME": str(tmp_path), "ABS_DATABASE_URL": url, "ABS_SPARK_MASTER": "local[2]"}

    def cli(*args: str) -> str:
        return cli_ok(None, *args, spark=spark, env=env)

    assert "is at revision" in cli("db", "upgrade")
    assert "wordcount" in cli("jobs")
    input_dir = tmp_path / "data" / "wordcount" / "input"
    land_batch(input_dir, 0, 300)
    out = cli("run", "wordcount", "--cycles", "2")
    assert "barrier 1 injected" in out and "committed 1;" in out
    # nothing new landed before the second barrier: an empty epoch, still a complete checkpoint
    assert "barrier 2 injected; 0 new segment(s)" in out and "committed 2;" in out
    assert "no pending epochs after checkpoint 2" in cli("process", "wordcount")
    rows = json.loads(cli("checkpoints", "wordcount", "--json"))
    assert [(r["checkpoint_id"], r["status"], r["acked_tasks"]) for r in rows] == [(1, "COMPLETED", 8), (2, "COMPLETED", 8)]
    store = CheckpointStore(make_engine(url))
    with store.engine.connect() as c:
        committed = dict(c.execute(text("SELECT word, count FROM wordcount_counts")).all())
    assert committed == dict(recount(input_dir, store.cut("wordcount", 2)))
    assert "checkpoint 2 verified" in cli("verify", "wordcount")
