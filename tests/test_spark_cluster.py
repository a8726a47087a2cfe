"""A real Spark standalone cluster (master and one worker on 127.0.0.1) runs the epochs DAG's submission.

The test starts both JVMs with ``spark-class`` from the pyspark package, points
the ``spark_default`` connection at the master (deploy mode client) and runs
the barrier and epoch DAGs with dag.test(): the py-files zip must reach the
executor and the committed counts must equal an independent recount.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from absreplay.airflow_demo import dags_folder, isolate_airflow_home, migrate_airflow_db, spark_connection

isolate_airflow_home()  # before airflow is imported: its configuration is read once

import pytest  # noqa: E402
from airflow.dag_processing.dagbag import DagBag  # noqa: E402
from pyspark.find_spark_home import _find_spark_home  # noqa: E402

from coordinator.checkpoints.lifecycle import CheckpointStatus  # noqa: E402
from tests.helpers import free_port, stop_process_group, make_workspace  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.postgres, pytest.mark.heavy(seconds=55)]

READY_TIMEOUT_S = 180


@dataclass
class StandaloneCluster:
    master_url: str
    ui_url: str
    work_dir: Path
    logs: list[Path]

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as resp:
            return json.load(resp)

    def log_tail(self) -> str:
        return "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text().splitlines()[-15:]) for p in self.logs)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    spark_class = Path(_find_spark_home()) / "bin" / "spark-class"
    master_port, master_ui, worker_port, worker_ui = (free_port() for _ in range(4))
    work = tmp_path / "spark-work"
    work.mkdir()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    cluster = StandaloneCluster(f"spark://127.0.0.1:{master_port}", f"http://127.0.0.1:{master_ui}", work,
                                [tmp_path / "spark-master.log", tmp_path / "spark-worker.log"])
    commands = [
        [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(master_port), "--webui-port", str(master_ui)],
        [str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
         "--port", str(worker_port), "--webui-port", str(worker_ui), "--cores", "2", "--memory", "2g",
         "--work-dir", str(work), cluster.master_url],
    ]
    procs = []
    try:
        for command, log in zip(commands, cluster.logs, strict=True):
            with log.open("w") as fh:
                procs.append(subprocess.Popen(command, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                              start_new_session=True))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                if cluster.state().get("aliveworkers") == 1:
                    break
            except (OSError, ValueError):  # not listening yet, or the UI answers HTML while it starts
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                pytest.fail(f"the standalone cluster did not come up:\n{cluster.log_tail()}")
            time.sleep(1)
        yield cluster
    finally:
        for proc in reversed(procs):
            stop_process_group(proc)


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
