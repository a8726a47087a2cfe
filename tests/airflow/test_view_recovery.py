"""Recovery from the ABS Replay view, in process, on SQLite and PostgreSQL catalogs.

The confirmation says what a rewind or recover would change (the same rule ``reset_after``
applies); two requests that arrive together start one run, and none starts while a recovery
of the job is running; the state of a followed run reads as a sentence; a refused request is a
REFUSED row with its reason. tests/airflow/test_airflow_view_browser.py does the same in a real Airflow.
"""

from __future__ import annotations

import html
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from absreplay.commands.airflow_demo import isolate_airflow_home

isolate_airflow_home()  # before airflow is imported: its configuration is read once

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager  # noqa: E402
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser  # noqa: E402
from airflow.api_fastapi.core_api.security import get_user  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from absreplay.airflow import orchestration, recovery_tasks  # noqa: E402
from absreplay.airflow_plugin import recovery_runs  # noqa: E402
from absreplay.airflow_plugin.access import auth_manager  # noqa: E402
from absreplay.airflow_plugin.app import app  # noqa: E402
from absreplay.airflow_plugin.catalog import catalog_engine  # noqa: E402
from coordinator.catalog.models import SinkTransaction  # noqa: E402
from coordinator.checkpoints import recovery  # noqa: E402
from coordinator.checkpoints.lifecycle import FailureReason, SinkTxnStatus  # noqa: E402
from coordinator.errors import CheckpointNotFoundError  # noqa: E402
from tests.helpers import Workspace, make_workspace  # noqa: E402

JOB = "wordcount"
DAG = f"abs_{JOB}_recover"


class FakeRuns:
    """Airflow's runs of the recover DAG, in memory; a trigger takes a moment, as a database write does."""

    def __init__(self) -> None:
        self.runs: dict[str, recovery_runs.Run] = {}
        self.paused = False

    def active(self, dag_id: str) -> list[str]:
        return [r.dag_run_id for r in self.runs.values() if r.state in recovery_runs.ACTIVE]

    def trigger(self, dag_id: str, conf: dict[str, Any], user_name: str) -> recovery_runs.Run:
        time.sleep(0.3)
        run = recovery_runs.Run(f"manual__{len(self.runs)}", "queued", self.paused)
        self.runs[run.dag_run_id] = run
        return run

    def run(self, dag_id: str, dag_run_id: str) -> recovery_runs.Run | None:
        return self.runs.get(dag_run_id)


@pytest.fixture
def ws(tmp_path, catalog_url: str) -> Workspace:
    """Checkpoints 1-3 COMPLETED, 4 FAILED, 5 PENDING; the sink committed 10 rows for 2 and 20 for 3."""
    ws = make_workspace(tmp_path, catalog_url)
    for n in range(1, 6):
        ws.land(n, lines=5, partitions=1)
        assert orchestration.inject_barrier(ws.settings, JOB)["checkpoint_id"] == n
        if n <= 3:
            ws.complete(n)
    ws.store.fail(JOB, 4, FailureReason.TASK_DECLINED, "declined")
    with ws.store.sessions.begin() as s:
        s.add_all(SinkTransaction(job=JOB, checkpoint_id=n, sink=ws.job.sinks[0].name, status=SinkTxnStatus.COMMITTED,
                                  staged_uri=f"file:///state/chk-{n}/sink", rows=10 * (n - 1)) for n in (2, 3))
    return ws


@pytest.fixture
def runs() -> FakeRuns:
    return FakeRuns()


@pytest.fixture
def as_role(ws: Workspace, runs: FakeRuns) -> Iterator:
    app.dependency_overrides[auth_manager] = SimpleAuthManager
    app.dependency_overrides[catalog_engine] = lambda: ws.store.engine
    app.dependency_overrides[recovery_runs.airflow_runs] = lambda: runs

    def client(role: str) -> TestClient:
        app.dependency_overrides[get_user] = lambda: SimpleAuthManagerUser(username=role, role=role)
        return TestClient(app, raise_server_exceptions=False)

    yield client
    app.dependency_overrides.clear()


def text_of(page: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</(li|table|p)>', page, re.S)
    assert found, (element_id, page)
    cells = re.sub(r"</t[dh]>", " ", found.group(1))
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", cells)).split())


def test_the_confirmation_says_what_a_rewind_and_a_recover_change(as_role, ws: Workspace) -> None:
    admin = as_role("admin")
    sink = ws.job.sinks[0].name
    rewind = admin.get(f"/jobs/{JOB}/checkpoints/1/recover", params={"rewind": "true"})
    assert rewind.status_code == 200
    assert text_of(rewind.text, "superseded").startswith("supersede checkpoints 2, 3, 5:")  # 4 FAILED stays
    assert "replace the sinks' output committed after checkpoint 1" in text_of(rewind.text, "sinks")
    assert text_of(rewind.text, "later-output").endswith(f"{sink} 2, 3 30 replaced")
    assert "Rewind to checkpoint 1</button>" in rewind.text

    recover = admin.get(f"/jobs/{JOB}/checkpoints/1/recover").text
    assert text_of(recover, "superseded").startswith("supersede checkpoints 2, 3, 5:")
    assert "deduplicated" in text_of(recover, "sinks")
    assert text_of(recover, "later-output").endswith(f"{sink} 2, 3 30 kept (deduplicated)")
    # after the latest completed one only a PENDING checkpoint: a recover supersedes nothing, a rewind it
    latest = admin.get(f"/jobs/{JOB}/checkpoints/3/recover").text
    assert text_of(latest, "superseded").startswith("supersede no checkpoint")
    assert "leave the sinks as they are" in text_of(latest, "sinks")
    assert text_of(admin.get(f"/jobs/{JOB}/checkpoints/3/recover?rewind=true").text, "superseded").startswith(
        "supersede checkpoint 5:")

    # what the page said is what the recovery does
    said = recovery_runs.preview(ws.store.engine, JOB, 1, False).superseded
    rid = recovery.start(ws.store, JOB, recovery.RecoveryKind.RECOVER, recovery.RecoveryMode.FULL, 1)
    assert recovery.reset_after(ws.store, ws.job, 1, rid, recovery.RecoveryKind.RECOVER).superseded == said

    failed = admin.get(f"/jobs/{JOB}/checkpoints/4/recover")
    assert failed.status_code == 409 and "is FAILED: only a COMPLETED checkpoint" in failed.text
    viewer = as_role("viewer")
    assert viewer.get(f"/jobs/{JOB}/checkpoints/1/recover").status_code == 403
    assert viewer.post(f"/api/jobs/{JOB}/recoveries", json={"checkpoint": 1}).status_code == 403


def test_requests_that_arrive_together_start_one_run(as_role, runs: FakeRuns, ws: Workspace) -> None:
    statuses: list[int] = []

    def click() -> None:
        statuses.append(as_role("admin").post(f"/api/jobs/{JOB}/recoveries",
                                              json={"checkpoint": 2, "rewind": True}).status_code)

    clicks = [threading.Thread(target=click) for _ in range(2)]
    for t in clicks:
        t.start()
    for t in clicks:
        t.join()
    assert sorted(statuses) == [200, 409] and list(runs.runs) == ["manual__0"]
    again = as_role("admin").post(f"/api/jobs/{JOB}/recoveries", json={"checkpoint": 2, "rewind": True})
    assert again.status_code == 409
    assert again.json()["detail"] == {"dag_run_id": "manual__0", "message": (
        f"a recovery of {JOB} is already under way: run manual__0 of {DAG} is queued or running")}

    # the run ended; a recovery started from the command line is RUNNING: still nothing starts
    runs.runs["manual__0"] = recovery_runs.Run("manual__0", "success", False)
    rid = recovery.start(ws.store, JOB, recovery.RecoveryKind.RECOVER, recovery.RecoveryMode.FULL, 3)
    busy = as_role("admin").post(f"/api/jobs/{JOB}/recoveries", json={"checkpoint": 3})
    assert busy.status_code == 409 and busy.json()["detail"]["message"].startswith(f"recovery #{rid} of {JOB}")
    recovery.finish(ws.store, rid, recovery.RecoveryResult.SUCCEEDED, restored=3)
    assert as_role("admin").post(f"/api/jobs/{JOB}/recoveries", json={"checkpoint": 3}).status_code == 200
    assert len(runs.runs) == 2
    bad = as_role("admin").post(f"/api/jobs/{JOB}/recoveries", json={"checkpoint": 2**63})
    assert bad.status_code == 422 and len(runs.runs) == 2


def test_a_followed_run_reads_as_a_sentence(as_role, runs: FakeRuns, ws: Workspace) -> None:
    admin = as_role("admin")
    runs.paused = True
    run_id = admin.post(f"/api/jobs/{JOB}/recoveries", json={"checkpoint": 2}).json()["dag_run_id"]
    queued = admin.get(f"/api/jobs/{JOB}/runs/{run_id}").json()
    assert (queued["state"], queued["paused"]) == ("queued", True)
    assert queued["message"].startswith(f"queued, and the DAG {DAG} is paused: the run waits until it is unpaused")

    runs.runs[run_id] = recovery_runs.Run(run_id, "failed", False)
    assert admin.get(f"/api/jobs/{JOB}/runs/{run_id}").json()["message"].startswith("failed before the recovery")
    rid = recovery.refuse(ws.store, JOB, "recover", "full", 2, "the lease is held", run_id)
    failed = admin.get(f"/api/jobs/{JOB}/runs/{run_id}").json()
    assert failed["recovery"]["id"] == rid
    assert failed["message"] == f"failed: refused (recovery #{rid}, nothing changed): the lease is held"
    assert admin.get(f"/api/jobs/{JOB}/runs/manual__99").status_code == 404


def test_a_refused_request_is_recorded_with_its_reason(ws: Workspace) -> None:
    with pytest.raises(CheckpointNotFoundError, match="PENDING"):
        recovery_tasks.validate_recovery(ws.settings, JOB, 5, "full", True, False, "manual__7")
    with pytest.raises(CheckpointNotFoundError, match="FAILED"):
        recovery_tasks.validate_recovery(ws.settings, JOB, 4, "full", False)
    pending, failed = recovery.history(ws.store, JOB)
    assert (pending["kind"], pending["result"], pending["requested_checkpoint_id"], pending["airflow_run_id"]) == (
        "rewind", "REFUSED", 5, "manual__7")
    assert "is still PENDING" in pending["detail"] and pending["finished_at"] is not None
    assert (failed["kind"], failed["result"], failed["airflow_run_id"]) == ("recover", "REFUSED", None)
    assert "is FAILED (TASK_DECLINED" in failed["detail"]
    # a valid request is no refusal: nothing recorded, the run id travels to the command line
    request = recovery_tasks.validate_recovery(ws.settings, JOB, 2, "full", True, False, "manual__8")
    assert recovery_tasks.command_args(request)[-2:] == ["--airflow-run-id", "manual__8"]
    assert len(recovery.history(ws.store, JOB)) == 2
