"""A real Airflow (``airflow standalone`` on loopback) lists the abs_* DAGs and runs the recover DAG.

Through the REST API v2: the DAGs are listed, ``abs_wordcount_recover`` is
triggered with a Params form that passes validation (the run recovers the job
for real: spark-submit of the recovery, audited in the recoveries table), with
an unknown checkpoint (fails at validation, no retry, the message in the task
log) and with a negative one (rejected by the JSON schema when triggered).

In the same Airflow, the sink is an asset (issue 31, item 1): the recovery that commits the
staged output of checkpoint 1 emits its event; the example downstream DAG of the docs
(docs/downstream_dags/wordcount_report.py, scheduled on the sink's asset) runs after an epochs
run whose ``finalize`` commits, and not after one whose ``finalize`` commits nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from absreplay.airflow import orchestration
from coordinator.checkpoints import recovery
from coordinator.dataflow.discovery import discover
from coordinator.checkpoints.lifecycle import FailureReason
from tests.airflow.airflow_standalone import PARALLELISM, RUN_TIMEOUT_S, Airflow, standalone
from tests.helpers import Workspace, make_workspace, stage_counts

pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.heavy(seconds=110)]

DAG = "abs_wordcount_recover"
EPOCHS = "abs_wordcount_epochs"
#: the example downstream DAG of docs/airflow.md, scheduled on the sink's asset
DOWNSTREAM_DAGS = Path(__file__).resolve().parents[2] / "docs" / "downstream_dags"
REPORT = "wordcount_report"


@pytest.fixture
def catalog(tmp_path: Path, pg_url: str) -> Workspace:
    """Checkpoint 1 COMPLETED with its output staged (the word counts of its cut), not yet committed;
    checkpoint 2 FAILED."""
    ws = make_workspace(tmp_path, pg_url)
    ws.land(0, lines=20)
    for _ in range(2):
        orchestration.inject_barrier(ws.settings, "wordcount")
    stage_counts(ws, 1, ws.expected_at(1), None)
    ws.complete(1)
    ws.store.fail("wordcount", 2, FailureReason.TASK_DECLINED)
    return ws


@pytest.fixture
def airflow(tmp_path: Path, catalog: Workspace, pg_url: str) -> Iterator[Airflow]:
    sink_asset = catalog.job.sinks[0].declaration.location(pg_url)
    with standalone(tmp_path, catalog, pg_url, more_dags=DOWNSTREAM_DAGS,
                    more_env={"WORDCOUNT_COUNTS_ASSET": sink_asset}) as api:
        yield api


def sink_events(airflow: Airflow, uri: str) -> list[dict]:
    """The asset events of the sink ``uri``, oldest first."""
    body = airflow.get("/assets/events?order_by=timestamp&limit=100")
    return [e for e in body["asset_events"] if e["uri"] == uri]


def runs(airflow: Airflow, dag_id: str) -> list[dict]:
    return airflow.get(f"/dags/{dag_id}/dagRuns?order_by=run_after")["dag_runs"]


def run_dag(airflow: Airflow, dag_id: str) -> tuple[Airflow, str]:
    """Trigger ``dag_id``, wait for its run to succeed; the client for that DAG and the run's id."""
    api = replace(airflow, dag=dag_id)
    status, run = api.trigger({})
    assert status == 200, run
    assert api.wait_for_run(run["dag_run_id"]) == "success", airflow.tail()
    return api, run["dag_run_id"]


def wait_until(what: str, check, airflow: Airflow):
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(2)
    pytest.fail(f"{what} did not happen in {RUN_TIMEOUT_S}s:\n{airflow.tail()}")


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

    check_sink_assets(airflow, catalog)


def check_sink_assets(airflow: Airflow, catalog: Workspace) -> None:
    """The sink's asset: one event from the recovery above (it committed checkpoint 1's staged output),
    one from an epochs run that commits (the downstream DAG runs), none from one that commits nothing."""
    uri = catalog.job.sinks[0].declaration.location(catalog.settings.database_url)
    assert uri.startswith("postgres://127.0.0.1:5432/abs_test_") and uri.endswith("/public/wordcount_counts")
    (recovered,) = sink_events(airflow, uri)
    assert (recovered["source_dag_id"], recovered["source_task_id"]) == (DAG, "run_recovery")
    assert recovered["extra"] == {"job": "wordcount", "sink": "sink", "checkpoints": [1],
                                  "rows": len(catalog.expected_at(1)), "high_water_marks": catalog.store.cut("wordcount", 1)}
    assert catalog.committed() == catalog.expected_at(1)

    # the downstream DAG (parsed from its own bundle) is switched on; so is the epochs DAG, to trigger it
    wait_until(f"{REPORT} is parsed", lambda: airflow.call("GET", f"/dags/{REPORT}")[0] == 200, airflow)
    assert airflow.get("/importErrors")["total_entries"] == 0
    for dag_id in (REPORT, EPOCHS):
        assert airflow.call("PATCH", f"/dags/{dag_id}", {"is_paused": False})[0] == 200

    # checkpoint 3: a new batch, its output staged, COMPLETED; the epochs run's finalize commits it
    catalog.land(1, lines=20)
    assert orchestration.inject_barrier(catalog.settings, "wordcount")["checkpoint_id"] == 3
    stage_counts(catalog, 3, catalog.expected_at(3), None)
    catalog.complete(3)
    epochs, run_id = run_dag(airflow, EPOCHS)
    assert "committed 3;" in epochs.task_log(run_id, "finalize", 1)
    _, committed = sink_events(airflow, uri)
    assert (committed["source_dag_id"], committed["source_task_id"], committed["source_run_id"]) == (
        EPOCHS, "finalize", run_id)
    assert committed["extra"] == {"job": "wordcount", "sink": "sink", "checkpoints": [3],
                                  "rows": len(catalog.expected_at(3)), "high_water_marks": catalog.store.cut("wordcount", 3)}
    # ... and the downstream DAG runs on it, told what was committed
    (report,) = wait_until(f"a run of {REPORT}", lambda: runs(airflow, REPORT), airflow)
    reports = replace(airflow, dag=REPORT)
    assert reports.wait_for_run(report["dag_run_id"]) == "success"
    assert report["run_type"] == "asset_triggered"
    assert "checkpoint(s) [3] committed" in reports.task_log(report["dag_run_id"], "report", 1)

    # an epochs run whose finalize commits nothing: no event, nothing queued, no downstream run
    epochs, run_id = run_dag(airflow, EPOCHS)
    assert "committed -;" in epochs.task_log(run_id, "finalize", 1)
    assert len(sink_events(airflow, uri)) == 2
    assert airflow.get(f"/dags/{REPORT}/assets/queuedEvents")["total_entries"] == 0
    assert [r["dag_run_id"] for r in runs(airflow, REPORT)] == [report["dag_run_id"]]
    assert catalog.committed() == catalog.expected_at(3)
