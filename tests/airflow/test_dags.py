"""The DAG files: they load, carry tags, retries and docs, import nothing heavy, and the recover form validates."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from datetime import timedelta

from absreplay.commands.airflow_demo import dags_folder, isolate_airflow_home

isolate_airflow_home()  # before airflow is imported: its configuration is read once

import pytest  # noqa: E402
from airflow.dag_processing.dagbag import DagBag  # noqa: E402
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: E402
from airflow.sdk import Asset, AssetAlias  # noqa: E402
from airflow.sdk.exceptions import ParamValidationError  # noqa: E402

from absreplay.airflow import orchestration  # noqa: E402
from absreplay.commands.submit import PROCESS_APP  # noqa: E402
from coordinator.dataflow.discovery import discover  # noqa: E402

EXPECTED = {f"abs_{job}_{kind}" for job in discover().jobs for kind in ("barriers", "epochs", "recover")} | {"abs_maintenance"}


@pytest.fixture(scope="module")
def bag() -> DagBag:
    return DagBag(dag_folder=dags_folder())


def test_every_dag_file_loads_without_import_errors(bag: DagBag) -> None:
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == EXPECTED


def test_every_dag_has_tags_retries_and_docs(bag: DagBag) -> None:
    for dag in bag.dags.values():
        assert "absreplay" in dag.tags, dag.dag_id
        assert dag.doc_md and len(dag.doc_md.strip()) > 200, dag.dag_id
        assert dag.tasks, dag.dag_id
        for task in dag.tasks:
            assert task.retries >= 1, f"{dag.dag_id}.{task.task_id} has retries={task.retries}"


def test_barriers_run_on_the_job_interval_and_emit_the_asset_epochs_waits_for(bag: DagBag) -> None:
    for name, job in discover().jobs.items():
        barriers = bag.dags[f"abs_{name}_barriers"]
        epochs = bag.dags[f"abs_{name}_epochs"]
        asset = Asset(name=orchestration.barrier_asset_name(name), uri=orchestration.barrier_asset_uri(name),
                      group="absreplay")
        assert barriers.schedule == timedelta(minutes=job.barrier_interval_minutes)
        assert barriers.get_task("inject_barrier").outlets == [asset]
        # barriers never depend on processing: the only link is the asset
        assert [t.task_id for t in barriers.tasks] == ["inject_barrier"]
        assert epochs.schedule == [asset]
        assert epochs.max_active_runs == 1


def test_finalize_and_the_recovery_publish_sink_commits_through_the_job_alias_only(bag: DagBag) -> None:
    """An Asset outlet would get an event on every success; the alias gets one per sink committed to."""
    for name, job in discover().jobs.items():
        alias = AssetAlias(name=f"abs_{name}_sink_commits", group="absreplay")
        assert bag.dags[f"abs_{name}_epochs"].get_task("finalize").outlets == [alias]
        if job.consistency != "weak":
            assert bag.dags[f"abs_{name}_recover"].get_task("run_recovery").outlets == [alias]
            assert bag.dags[f"abs_{name}_recover"].get_task("validate_request").outlets == []
        assert bag.dags[f"abs_{name}_epochs"].get_task("process_epochs").outlets == []


def test_epochs_submit_the_processing_application_then_finalize(bag: DagBag) -> None:
    epochs = bag.dags["abs_wordcount_epochs"]
    process = epochs.get_task("process_epochs")
    assert isinstance(process, SparkSubmitOperator)
    assert process._conn_id == "spark_default"
    assert process.application == str(PROCESS_APP)
    assert process.application_args == ["wordcount", "--snapshot-mode", "{{ params.snapshot_mode }}"]
    assert process.py_files == "{{ abs_py_files() }}"
    assert set(process.env_vars) == set(orchestration.DRIVER_ENV)
    assert process.conf["spark.pyspark.python"] == "{{ abs_python() }}"
    assert epochs.user_defined_macros.keys() == {"abs_setting", "abs_py_files", "abs_python"}
    assert process.downstream_task_ids == {"finalize"}
    assert epochs.params["snapshot_mode"] == "async"


def test_maintenance_maps_over_the_catalog_jobs(bag: DagBag) -> None:
    dag = bag.dags["abs_maintenance"]
    assert dag.get_task("maintain").upstream_task_ids == {"catalog_jobs"}
    assert dag.schedule == timedelta(hours=1)


def test_recover_is_manual_with_defaults_latest_full_no_rewind(bag: DagBag) -> None:
    dag = bag.dags["abs_wordcount_recover"]
    assert dag.schedule is None
    assert dag.params.validate() == {"checkpoint": None, "mode": "full", "rewind": False, "fallback": False,
                                     "upgrade": False}
    params = copy.deepcopy(dag.params)
    params.update({"checkpoint": 7, "mode": "partial", "rewind": True, "fallback": True})
    assert params.validate() == {"checkpoint": 7, "mode": "partial", "rewind": True, "fallback": True,
                                 "upgrade": False}


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("checkpoint", -1),
        ("checkpoint", 0),
        ("checkpoint", 2**63),  # past the catalog's BIGINT ids, as the command line and the view refuse it
        ("checkpoint", "3"),
        ("checkpoint", 2.5),
        ("checkpoint", True),
        ("mode", "quick"),
        ("mode", None),
        ("rewind", "yes"),
        ("rewind", 1),
    ],
)
def test_recover_params_reject_bad_values(bag: DagBag, key: str, bad: object) -> None:
    params = copy.deepcopy(bag.dags["abs_wordcount_recover"].params)
    with pytest.raises(ParamValidationError, match=f"Invalid input for param {key}"):
        params[key] = bad


def test_parsing_imports_nothing_heavy_and_touches_no_catalog(tmp_path) -> None:
    """A fresh interpreter parses the DAG folder with an unreachable catalog configured both ways. Job
    files are user code that may import pyspark's Python API (and so pyarrow), but no JVM starts, no
    database driver loads and nothing is written."""
    unreachable = "postgresql://nobody@127.0.0.1:9/nowhere"
    env = {**os.environ, "ABS_DATABASE_URL": unreachable, "AIRFLOW_VAR_ABS_DATABASE_URL": unreachable,
           "ABS_HOME": str(tmp_path / "home")}
    code = (
        "import sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        "bag = DagBag(dag_folder=sys.argv[1])\n"
        "assert not bag.import_errors, bag.import_errors\n"
        "from pyspark import SparkContext\n"
        "print(len(bag.dags), sorted(m for m in ('psycopg2',) if m in sys.modules), SparkContext._gateway)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(dags_folder())], env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == f"{len(EXPECTED)} [] None"
    assert not (tmp_path / "home").exists()  # nothing built or written at parse time


def test_a_weak_job_gets_no_recover_dag_and_its_dags_say_what_it_is(monkeypatch) -> None:
    """tests/jobs/weak_wordcount.py (consistency='weak'): barriers and epochs as any job, tagged and
    documented as weak consistency; no recover DAG, since it has no consistent checkpoint."""
    from coordinator.checkpoints import weak
    from tests.helpers import JOBS_DIR

    monkeypatch.setenv("ABS_JOBS_DIR", str(JOBS_DIR))
    bag = DagBag(dag_folder=dags_folder())
    assert bag.import_errors == {}
    assert "abs_views_by_country_recover" in bag.dag_ids
    assert "abs_weak_wordcount_recover" not in bag.dag_ids
    for kind in ("barriers", "epochs"):
        dag = bag.dags[f"abs_weak_wordcount_{kind}"]
        assert "weak consistency" in dag.tags and weak.LABEL in dag.doc_md
    assert "weak consistency" not in bag.dags["abs_views_by_country_epochs"].tags
