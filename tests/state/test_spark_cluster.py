"""A real Spark standalone cluster (master and one worker on 127.0.0.1) runs the epochs DAG's submission.

The test starts both JVMs with ``spark-class`` from the pyspark package
(``absreplay.commands.standalone_cluster``), points the ``spark_default`` connection at
the master (deploy mode client) and runs the barrier and epoch DAGs with
dag.test(): the py-files zip must reach the executor and the committed counts
must equal an independent recount.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from absreplay.commands.airflow_demo import dags_folder, isolate_airflow_home, migrate_airflow_db, spark_connection

isolate_airflow_home()  # before airflow is imported: its configuration is read once

import pytest  # noqa: E402
from airflow.dag_processing.dagbag import DagBag  # noqa: E402

from absreplay.commands.standalone_cluster import StandaloneCluster, standalone_cluster  # noqa: E402
from coordinator.checkpoints.lifecycle import CheckpointStatus  # noqa: E402
from tests.helpers import make_workspace  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.postgres, pytest.mark.heavy(seconds=55)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    with standalone_cluster(tmp_path / "spark", workers=1, cores=2, memory="2g") as cluster:
        yield cluster


def test_a_standalone_cluster_runs_the_epochs_dag_submission_exactly(
    cluster: StandaloneCluster, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrate_airflow_db(dict(os.environ))
    ws = make_workspace(tmp_path, pg_url)
    env = ws.settings.as_env()
    for key in ("ABS_HOME", "ABS_DATA_DIR", "ABS_STATE_URI"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.setenv("AIRFLOW_VAR_ABS_DATABASE_URL", pg_url)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", spark_connection(cluster.master_url, "client"))
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    dags = DagBag(dag_folder=dags_folder()).dags

    ws.land(0)
    ws.land(1)
    assert dags["abs_wordcount_barriers"].test().state == "success"
    assert dags["abs_wordcount_epochs"].test().state == "success", cluster.log_tail()

    assert {c.checkpoint_id: c.status for c in ws.store.checkpoints("wordcount")} == {1: CheckpointStatus.COMPLETED}
    assert ws.committed() == ws.expected_latest() != {}
    apps = cluster.state()["completedapps"]
    assert [(a["name"], a["state"]) for a in apps] == [("absreplay-wordcount", "FINISHED")]
    # the executor fetched the project's code: the zip built under ABS_HOME/pyfiles
    built = {p.name for p in (Path(env["ABS_HOME"]) / "pyfiles").glob("absreplay-pyfiles-*.zip")}
    shipped = {p.name for p in cluster.work_dir.glob("app-*/*/absreplay-pyfiles-*.zip")}
    assert shipped and shipped <= built
