"""connected_components has its DAGs like every registered job: barriers, epochs (spark-submit), recover."""

from __future__ import annotations

from datetime import timedelta

from absreplay.commands.airflow_demo import dags_folder, isolate_airflow_home

isolate_airflow_home()  # before airflow is imported: its configuration is read once

from airflow.dag_processing.dagbag import DagBag  # noqa: E402
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: E402

from absreplay.commands.submit import PROCESS_APP  # noqa: E402

JOB = "connected_components"


def test_connected_components_dags_load_and_submit_the_job() -> None:
    bag = DagBag(dag_folder=dags_folder())
    assert bag.import_errors == {}
    barriers, epochs, recover = (bag.dags[f"abs_{JOB}_{kind}"] for kind in ("barriers", "epochs", "recover"))
    assert barriers.schedule == timedelta(minutes=5) and JOB in barriers.tags
    process = epochs.get_task("process_epochs")
    assert isinstance(process, SparkSubmitOperator) and process.application == str(PROCESS_APP)
    assert process.application_args == [JOB, "--snapshot-mode", "{{ params.snapshot_mode }}"]
    assert process.downstream_task_ids == {"finalize"}
    assert recover.schedule is None and recover.params.validate()["mode"] == "full"
