"""`absreplay recover` and `rewind` as a user types them: bad input exits 2 and writes nothing,
a second run while one holds the job's lease exits 2, and a rewind runs end to end. Through the
CLI's entry point in this process (the rewind's application on the shared session)."""

from __future__ import annotations

import json

import pytest

from coordinator.catalog.db import make_engine
from coordinator.checkpoints import recovery
from coordinator.checkpoints.lease import processing_lease
from tests.helpers import cli, cli_ok, make_workspace


@pytest.fixture
def catalog(tmp_path, pg_url):
    """Checkpoints 1 and 2 COMPLETED (acked without state: these tests never start Spark)."""
    ws = make_workspace(tmp_path, pg_url)
    for checkpoint_id in (1, 2):
        ws.coordinator.inject()
        ws.complete(checkpoint_id)
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
    before = catalog.store.history("wordcount")
    r = cli(catalog, *args)
    assert r.code == 2, r.out + r.err
    assert message in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert catalog.store.history("wordcount") == before
    # a refused request about a checkpoint is audited with its reason; a bad option or job is no request
    refused = [(r["result"], message in r["detail"]) for r in recovery.history(catalog.store, "wordcount")]
    assert refused == ([("REFUSED", True)] if "checkpoint" in message or "partial" in args else []), refused


def test_a_recovery_while_another_run_holds_the_job_exits_2(catalog, pg_url) -> None:
    with processing_lease(make_engine(pg_url), "wordcount"):
        r = cli(catalog, "recover", "wordcount")
    assert r.code == 2 and "holds its lease" in r.err, r.err
    (row,) = recovery.history(catalog.store, "wordcount")
    assert (row["kind"], row["result"]) == ("recover", "REFUSED") and "holds its lease" in row["detail"]


def test_a_rewind_whose_checkpoint_is_subsumed_after_the_command_checked_it_is_refused_by_the_driver(
    catalog, spark, monkeypatch
) -> None:
    """A processing run completes checkpoints 3 and 4 and its finalize subsumes 1 while the command starts its
    application: the driver refuses, audits it, and the command prints that row, not an earlier one."""
    from absreplay.commands import submit

    earlier = recovery.refuse(catalog.store, "wordcount", "recover", "full", 9, "an earlier refusal")
    in_session = submit.run_in_session

    def finalize_first(session, app_args, app=submit.PROCESS_APP):
        for checkpoint_id in (3, 4):
            catalog.coordinator.inject()
            catalog.complete(checkpoint_id)
        assert catalog.coordinator.finalize().subsumed == [1]
        return in_session(session, app_args, app)

    monkeypatch.setattr(submit, "run_in_session", finalize_first)
    r = cli(catalog, "rewind", "wordcount", "--to", "1", spark=spark)
    assert r.code == 2, r.out + r.err
    assert "rewind from checkpoint 1" in r.out and "error: checkpoint 1 of job 'wordcount' is SUBSUMED" in r.err
    rows = recovery.history(catalog.store, "wordcount")
    assert [(row["id"], row["kind"], row["result"], row["requested_checkpoint_id"]) for row in rows] == [
        (earlier, "recover", "REFUSED", 9), (rows[-1]["id"], "rewind", "REFUSED", 1)]
    assert rows[-1]["detail"].startswith("checkpoint 1 of job 'wordcount' is SUBSUMED")
    assert f"recovery #{rows[-1]['id']} (rewind, full): REFUSED" in r.out and f"recovery #{earlier} " not in r.out


def test_rewind_as_typed_then_the_audit(ws, spark) -> None:
    out = cli_ok(ws, "rewind", "wordcount", "--to", "1", spark=spark)
    assert "recovery #1 (rewind, full): SUCCEEDED; restored 1, now at 3, superseded 1" in out
    assert ws.committed() == ws.expected_at(3) == ws.expected_at(2)
    (row,) = json.loads(cli_ok(ws, "recoveries", "wordcount", "--json"))
    assert (row["kind"], row["from_checkpoint_id"], row["to_checkpoint_id"], row["result"]) == (
        "rewind", 1, 3, "SUCCEEDED")
    history = json.loads(cli_ok(ws, "checkpoints", "wordcount", "--json"))
    assert [(h["checkpoint_id"], h["status"]) for h in history] == [(1, "COMPLETED"), (2, "SUPERSEDED"), (3, "COMPLETED")]
