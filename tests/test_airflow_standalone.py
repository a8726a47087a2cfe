"""A real Airflow (``airflow standalone`` on loopback) lists the abs_* DAGs and runs the recover DAG.

Through the REST API v2: the DAGs are listed, ``abs_wordcount_recover`` is
triggered with a Params form that passes validation (the run recovers the job
for real: spark-submit of the recovery, audited in the recoveries table), with
an unknown checkpoint (fails at validation, no retry, the message in the task
log) and with a negative one (rejected by the JSON schema when triggered).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from absreplay.airflow import orchestration
from coordinator.checkpoints import recovery
from absreplay.job_discovery import discover
from coordinator.checkpoints.lifecycle import FailureReason
from tests.airflow_standalone import PARALLELISM, Airflow, standalone
from tests.helpers import Workspace, make_workspace

pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.heavy(seconds=75)]

DAG = "abs_wordcount_recover"


@pytest.fixture
def catalog(tmp_path: Path, pg_url: str) -> Workspace:
    """Checkpoint 1 COMPLETED, checkpoint 2 FAILED."""
    ws = make_workspace(tmp_path, pg_url)
    ws.land(0, lines=20)
    for _ in range(2):
        orchestration.inject_barrier(ws.settings, "wordcount")
    ws.complete(1)
    ws.store.fail("wordcount", 2, FailureReason.TASK_DECLINED)
    return ws


@pytest.fixture
def airflow(tmp_path: Path, catalog: Workspace, pg_url: str) -> Iterator[Airflow]:
    with standalone(tmp_path, catalog, pg_url) as api:
        yield api


def test_airflow_lists_the_dags_and_recovers_from_the_form(airflow: Airflow, catalog: Workspace) -> None:
    dags = airflow.get("/dags?dag_id_pattern=abs_")["dags"]
    assert {d["dag_id"] for d in dags} == {"abs_maintenance"} | {
        f"abs_{job}_{kind}" for job in discover().jobs for kind in ("barriers", "epochs", "recover")}
    assert all("absreplay" in {t["name"] for t in d["tags"]} for d in dags)
    assert airflow.get("/importErrors")["total_entries"] == 0
    # sized for the host, not Airflow's default 32 worker processes
    assert 1 <= airflow.executor_workers() <= PARALLELISM
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
