"""A real Airflow (``airflow standalone`` on loopback) lists the abs_* DAGs and runs the recover DAG.

Through the REST API v2: the DAGs are listed, ``abs_wordcount_recover`` is
triggered with a Params form that passes validation (the run recovers the job
for real: spark-submit of the recovery, audited in the recoveries table), with
an unknown checkpoint (fails at validation, no retry, the message in the task
log) and with a negative one (rejected by the JSON schema when triggered).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from absreplay import orchestration
from coordinator import recovery
from coordinator.jobs import REGISTRY
from absreplay.airflow_demo import airflow_env, airflow_executable
from coordinator.lifecycle import FailureReason
from coordinator.store import StateHandle
from tests.helpers import free_port, stop_process_group, Workspace, make_workspace

pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.heavy(seconds=75)]

DAG = "abs_wordcount_recover"
READY_TIMEOUT_S = 240
RUN_TIMEOUT_S = 240


@dataclass
class Airflow:
    base: str
    log: Path

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.base}/api/v2{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.load(resp)
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def get(self, path: str) -> Any:
        status, body = self.call("GET", path)
        assert status == 200, (path, status, body)
        return body

    def trigger(self, conf: dict[str, Any]) -> tuple[int, Any]:
        return self.call("POST", f"/dags/{DAG}/dagRuns", {"logical_date": None, "conf": conf})

    def wait_for_run(self, run_id: str) -> str:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            state = self.get(f"/dags/{DAG}/dagRuns/{run_id}")["state"]
            if state in ("success", "failed"):
                return state
            time.sleep(2)
        pytest.fail(f"run {run_id} did not finish in {RUN_TIMEOUT_S}s:\n{self.tail()}")

    def task_instances(self, run_id: str) -> dict[str, dict]:
        body = self.get(f"/dags/{DAG}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti for ti in body["task_instances"]}

    def task_log(self, run_id: str, task_id: str, try_number: int) -> str:
        body = self.get(f"/dags/{DAG}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}?full_content=true")
        return json.dumps(body["content"])

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])


@pytest.fixture
def catalog(tmp_path: Path, pg_url: str) -> Workspace:
    """Checkpoint 1 COMPLETED, checkpoint 2 FAILED."""
    ws = make_workspace(tmp_path, pg_url)
    ws.land(0, lines=20)
    for _ in range(2):
        orchestration.inject_barrier(ws.settings, "wordcount")
    ws.store.ack_many("wordcount", 1, [StateHandle(t.operator, t.subtask) for t in ws.job.execution_graph.tasks])
    ws.store.fail("wordcount", 2, FailureReason.TASK_DECLINED)
    return ws


@pytest.fixture
def airflow(tmp_path: Path, catalog: Workspace, pg_url: str) -> Iterator[Airflow]:
    port = free_port()
    home = tmp_path / "airflow"
    home.mkdir()
    env = {
        **os.environ,
        **airflow_env(home, "local[2]"),
        **{k: v for k, v in catalog.settings.as_env().items() if k != "ABS_DATABASE_URL"},
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW_VAR_ABS_DATABASE_URL": pg_url,
    }
    log = tmp_path / "airflow-standalone.log"
    with log.open("w") as fh:
        proc = subprocess.Popen([airflow_executable(), "standalone"], env=env, cwd=tmp_path, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
    api = Airflow(f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                health = api.call("GET", "/monitor/health")[1]
                if health and all(health[c]["status"] == "healthy"
                                  for c in ("metadatabase", "scheduler", "dag_processor", "triggerer")):
                    if api.get("/dags?dag_id_pattern=abs_")["total_entries"] >= 4:
                        break
            except (OSError, ValueError, KeyError, TypeError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"airflow standalone did not become ready:\n{api.tail()}")
            time.sleep(2)
        yield api
    finally:
        # nothing of this Airflow is kept: its components get 5 s to stop before the SIGKILL
        stop_process_group(proc, grace_s=5)


def test_airflow_lists_the_dags_and_recovers_from_the_form(airflow: Airflow, catalog: Workspace) -> None:
    dags = airflow.get("/dags?dag_id_pattern=abs_")["dags"]
    assert {d["dag_id"] for d in dags} == {"abs_maintenance"} | {
        f"abs_{job}_{kind}" for job in REGISTRY for kind in ("barriers", "epochs", "recover")}
    assert all("absreplay" in {t["name"] for t in d["tags"]} for d in dags)
    assert airflow.get("/importErrors")["total_entries"] == 0
    status, _ = airflow.call("PATCH", f"/dags/{DAG}", {"is_paused": False})
    assert status == 200

    # rejected by the JSON schema of the form: no run is created
    status, body = airflow.trigger({"checkpoint": -1})
    assert status == 400, body
    assert "checkpoint" in json.dumps(body)

    # valid form: the recovery runs (spark-submit from the task) and is audited in the catalog
    status, run = airflow.trigger({"checkpoint": 1, "mode": "full", "rewind": False})
    assert status == 200, run
    assert airflow.wait_for_run(run["dag_run_id"]) == "success", airflow.tail()
    tis = airflow.task_instances(run["dag_run_id"])
    assert tis["validate_request"]["state"] == "success"
    assert (tis["run_recovery"]["state"], tis["run_recovery"]["try_number"]) == ("success", 1)
    log = airflow.task_log(run["dag_run_id"], "run_recovery", 1)
    assert "absreplay recover wordcount --checkpoint 1 --mode full" in log
    assert "recovery #1 (recover, full): SUCCEEDED" in log
    (row,) = recovery.history(catalog.store, "wordcount")
    assert (row["from_checkpoint_id"], row["result"]) == (1, "SUCCEEDED")

    # an unknown checkpoint fails at validation, once (bad input is not retried), and says so
    status, run = airflow.trigger({"checkpoint": 999})
    assert status == 200, run
    assert airflow.wait_for_run(run["dag_run_id"]) == "failed"
    tis = airflow.task_instances(run["dag_run_id"])
    assert (tis["validate_request"]["state"], tis["validate_request"]["try_number"]) == ("failed", 1)
    assert tis["run_recovery"]["state"] == "upstream_failed"
    assert "checkpoint 999 of job 'wordcount' does not exist" in airflow.task_log(
        run["dag_run_id"], "validate_request", 1)
