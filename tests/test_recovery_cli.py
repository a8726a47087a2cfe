"""`absreplay recover` and `rewind` as a user types them: bad input exits 2 and writes nothing,
a second run while one holds the job's lease exits 2, and a rewind runs end to end."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from coordinator import recovery
from coordinator.catalog.db import make_engine
from coordinator.lease import processing_lease
from coordinator.store import StateHandle
from tests.helpers import ABSREPLAY, make_workspace, run_ok

pytestmark = pytest.mark.spark


def absreplay(ws, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ABSREPLAY, *args], env={**os.environ, **ws.env(), "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def catalog(tmp_path, pg_url):
    """Checkpoints 1 and 2 COMPLETED (acked without state: these tests never start Spark)."""
    ws = make_workspace(tmp_path, pg_url)
    for checkpoint_id in (1, 2):
        ws.coordinator.inject()
        ws.store.ack_many("wordcount", checkpoint_id, [StateHandle(t.operator, t.subtask) for t in ws.job.execution_graph.tasks])
    return ws


@pytest.fixture
def ws(tmp_path, pg_url, spark):
    ws = make_workspace(tmp_path, pg_url)
    for b in range(2):
        ws.cycle(spark, b)
    return ws


@pytest.mark.parametrize("args, message", [
    (["recover", "wordcount", "--mode", "quick"], "--mode must be full or partial, not 'quick'"),
    (["recover", "wordcount", "--checkpoint", "9"], "checkpoint 9 of job 'wordcount' does not exist"),
    (["recover", "wordcount", "--checkpoint", "1", "--mode", "partial"], "needs --mode full"),
    (["rewind", "wordcount", "--to", "7"], "checkpoint 7 of job 'wordcount' does not exist"),
    (["recover", "nosuchjob"], "unknown job 'nosuchjob'"),
])
def test_bad_recovery_input_exits_2_and_writes_nothing(catalog, args, message) -> None:
    r = absreplay(catalog, *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert recovery.history(catalog.store, "wordcount") == []


def test_a_recovery_while_another_run_holds_the_job_exits_2(catalog, pg_url) -> None:
    with processing_lease(make_engine(pg_url), "wordcount"):
        r = absreplay(catalog, "recover", "wordcount")
    assert r.returncode == 2 and "holds its lease" in r.stderr, r.stderr
    assert recovery.history(catalog.store, "wordcount") == []


def test_rewind_as_typed_then_the_audit(ws) -> None:
    out = run_ok(ws, "rewind", "wordcount", "--to", "1")
    assert "recovery #1 (rewind, full): SUCCEEDED; restored 1, now at 3, superseded 1" in out
    assert ws.committed() == ws.expected_at(3) == ws.expected_at(2)
    (row,) = [json.loads(line) for line in run_ok(ws, "recoveries", "wordcount", "--json").splitlines()]
    assert (row["kind"], row["from_checkpoint_id"], row["to_checkpoint_id"], row["result"]) == (
        "rewind", 1, 3, "SUCCEEDED")
    history = [json.loads(line) for line in run_ok(ws, "checkpoints", "wordcount", "--json").splitlines()]
    assert [(h["checkpoint_id"], h["status"]) for h in history] == [(1, "COMPLETED"), (2, "SUPERSEDED"), (3, "COMPLETED")]
