"""Deletes reach state, snapshots and sinks: tests/jobs/open_carts.py's process function deletes a user's cart
at checkout. Checked against tests/carts_data's plain-Python reference in all three sinks (a SQL table, a
Delta table, a Parquet directory), through `verify`, `state`, a rewind that brings deleted rows back, and
SIGKILLs mid-epoch recovered by `absreplay recover`.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from coordinator.dataflow.discovery import get_job
from coordinator.sinks.deletes import DELETE
from tests import carts_data
from tests.helpers import JOBS_DIR, cli_ok, crash, make_workspace, start

JOBS = str(JOBS_DIR)
pytestmark = [pytest.mark.spark]
CLEAN = {"to_sql": (0, 0), "to_delta": (0, 0), "to_parquet": (0, 0)}


@pytest.fixture
def carts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str):
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    monkeypatch.setenv("CARTS_DELTA", str(tmp_path / "delta" / "carts"))
    monkeypatch.setenv("CARTS_PARQUET", str(tmp_path / "parquet" / "carts"))
    return make_workspace(tmp_path, sqlite_url, get_job("open_carts"), jobs_dir=JOBS)


def expected_at(ws, checkpoint_id: int) -> dict[str, tuple[int, int]]:
    return carts_data.reference(ws.input_dir, ws.store.cut(ws.job.name, checkpoint_id))


def sinks(ws) -> dict[str, dict[str, tuple[int, int]]]:
    return {s.name: carts_data.sink_rows(s.target(ws.settings.database_url).read()) for s in ws.job.sinks}


def tombstones_in(ws, checkpoint_id: int) -> int:
    """Rows of the cart operator's snapshot files of ``checkpoint_id`` that are tombstones."""
    acks = [a for a in ws.store.acks(ws.job.name, checkpoint_id) if a.operator == "cart" and a.state_uri]
    found = 0
    for ack in acks:
        table = ds.dataset(ack.state_uri.removeprefix("file:"), format="parquet").to_table()
        found += sum(1 for v in table.column(DELETE).to_pylist() if v)
    return found


def test_deleted_keys_leave_state_and_sinks_and_a_rewind_brings_them_back(carts, spark) -> None:
    ws = carts
    for batch in range(4):
        carts_data.land(ws.input_dir, batch)
        ws.coordinator.inject()
    cli_ok(ws, "process", "open_carts", spark=spark)  # one run: its snapshots after the first two are deltas
    cli_ok(ws, "finalize", "open_carts")
    assert carts_data.check(ws) == CLEAN
    final = expected_at(ws, 4)
    assert all(table == final for table in sinks(ws).values())
    closed = set(expected_at(ws, 2)) - set(final)  # open at checkpoint 2, checked out since and not reopened
    assert closed and all(user not in table for table in sinks(ws).values() for user in closed)
    # a delete is a row of an incremental snapshot, not a full one
    deltas = [n for n in range(2, 5) if all(a.base_checkpoint_id == n - 1 for a in ws.store.acks(ws.job.name, n)
                                            if a.operator == "cart" and a.state_uri)]
    assert deltas and any(tombstones_in(ws, n) for n in deltas)
    # what `state` shows is the live state: no deleted key, no marker
    import json

    state = json.loads(cli_ok(ws, "state", "open_carts", "--checkpoint", "4", "--format", "json"))
    assert {row["user"]: (row["items"], row["last_add"]) for row in state} == final
    assert "verified" in cli_ok(ws, "verify", "open_carts", spark=spark)

    # a rewind to checkpoint 2 reverts every sink first: the carts closed since are back ...
    crash(ws, spark, "recovery.after_reset", "rewind", "open_carts", "--to", "2")
    back = sinks(ws)
    assert all(table == expected_at(ws, 2) for table in back.values()), back
    assert all(user in table for table in back.values() for user in closed)
    # ... and the replayed epochs delete them again
    cli_ok(ws, "recover", "open_carts", spark=spark)
    assert carts_data.check(ws) == CLEAN
    assert all(table == final for table in sinks(ws).values())
    assert "verified" in cli_ok(ws, "verify", "open_carts", spark=spark)


@pytest.mark.heavy(seconds=70)
@pytest.mark.timeout(600)
def test_a_crash_and_a_sigkill_mid_epoch_lose_and_duplicate_no_delete(carts, spark, summary) -> None:
    ws = carts
    carts_data.land(ws.input_dir, 0)
    ws.coordinator.inject()
    carts_data.land(ws.input_dir, 1)
    ws.coordinator.inject()
    # the process dies computing epoch 2, checkpoint 1 done (and maybe not yet committed)
    crash(ws, spark, "epoch.compute@2", "recover", "open_carts")
    carts_data.land(ws.input_dir, 2)
    ws.coordinator.inject()
    # killed in the middle of a sink commit of the recovery's catch-up
    killed = start(ws, "recover", "open_carts", faults="sink.mid_commit=kill")
    out, _ = killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL, out
    carts_data.land(ws.input_dir, 3)
    ws.coordinator.inject()
    cli_ok(ws, "recover", "open_carts", spark=spark)  # the recovery on the test's session: no third JVM
    found = carts_data.check(ws)
    summary(f"open_carts: a crash and a SIGKILL, (lost, duplicated) per sink {found}")
    assert found == CLEAN
    latest = ws.store.latest_completed(ws.job.name).checkpoint_id
    assert all(table == expected_at(ws, latest) for table in sinks(ws).values())
    assert set(expected_at(ws, 2)) - set(expected_at(ws, latest))  # some carts were deleted on the way
    assert "verified" in cli_ok(ws, "verify", "open_carts", spark=spark)
