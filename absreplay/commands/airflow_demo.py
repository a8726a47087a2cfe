"""The demo through Airflow: the same story as ``absreplay.commands.demo``, driven by the project's DAGs.

On embedded defaults: a temporary AIRFLOW_HOME on SQLite (``airflow db
migrate``), the DAGs of ``dags/``, a SQLite catalog handed to the DAGs through
the Variable ``abs_database_url`` (as ``AIRFLOW_VAR_ABS_DATABASE_URL``), and the
connection ``spark_default`` pointing at a local master, so SparkSubmitOperator
really runs spark-submit. Text lands in batches; after every batch
``abs_wordcount_barriers`` runs, after every second one ``abs_wordcount_epochs``
(each through ``airflow dags test``); then the audit and the verdict against the job's reference.

``airflow_env`` and ``isolate_airflow_home`` also serve tests that run DAGs
in-process (``dag.test()``).
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console

from absreplay.commands.demo import JOB, check_exact, demo_catalog, demo_settings, finish_demo
from absreplay.commands.submit import make_jvm_archive
from absreplay.commands.context import DATABASE_URL_VARIABLE
from coordinator.errors import AbsError, ConfigError

ISOLATED_MARKER = "ABS_ISOLATED_AIRFLOW_HOME"


def dags_folder() -> Path:
    spec = importlib.util.find_spec("dags")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the project's dags package is not installed (pip install -e .)")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def spark_connection(master: str, deploy_mode: str | None = None) -> str:
    """The ``spark_default`` connection (JSON) for ``master``: local[N], spark://HOST:PORT, yarn, k8s://...

    SparkSubmitHook takes a ``spark`` connection's host as the whole master URL
    when it contains ``://`` or no port is set, so the host carries it all.
    """
    conn: dict[str, object] = {"conn_type": "spark", "host": master}
    if deploy_mode:
        conn["extra"] = {"deploy-mode": deploy_mode}
    return json.dumps(conn)


def airflow_env(airflow_home: Path, spark_master: str) -> dict[str, str]:
    """Environment of an Airflow on SQLite in ``airflow_home`` that loads the project's DAGs."""
    bin_dir = str(Path(sys.executable).parent)
    return {
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder()),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW_CONN_SPARK_DEFAULT": spark_connection(spark_master),
        # spark-submit and airflow are found on PATH (SparkSubmitHook, `airflow standalone`)
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
    }


def isolate_airflow_home(spark_master: str = "local[2]") -> Path:
    """Point this process's Airflow at a fresh temporary home; call before anything imports airflow.

    Idempotent within a process: later calls return the home already in effect.
    """
    current = os.environ.get(ISOLATED_MARKER)
    if current:
        return Path(current)
    if "airflow" in sys.modules:
        raise RuntimeError("airflow was imported before isolate_airflow_home(): its configuration is already read")
    home = Path(tempfile.mkdtemp(prefix="absreplay-airflow-"))
    atexit.register(shutil.rmtree, home, True)
    os.environ.update(airflow_env(home, spark_master))
    os.environ[ISOLATED_MARKER] = str(home)
    return home


def airflow_executable() -> str:
    from absreplay.commands.submit import executable

    return executable("airflow")


def migrate_airflow_db(env: dict[str, str], log: Path | None = None) -> None:
    proc = subprocess.run([airflow_executable(), "db", "migrate"], env=env, capture_output=True, text=True)
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(proc.stdout + proc.stderr)
    if proc.returncode:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise AbsError("airflow db migrate failed:\n" + "\n".join(tail))


def run_dag(env: dict[str, str], dag_id: str, log: Path) -> bool:
    """One run of ``dag_id`` through ``airflow dags test``; its output goes to ``log``. True if it succeeded."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        proc = subprocess.run([airflow_executable(), "dags", "test", dag_id], env=env, stdout=fh,
                              stderr=subprocess.STDOUT)
    return proc.returncode == 0


def run_airflow_demo(console: Console, batches: int, lines_per_batch: int) -> bool:
    settings = demo_settings("airflow-demo")
    home = settings.home
    logs = home / "logs"
    env = {
        **os.environ,
        **settings.as_env(),
        **airflow_env(home / "airflow", settings.spark_master),
        f"AIRFLOW_VAR_{DATABASE_URL_VARIABLE.upper()}": settings.database_url,
    }
    console.print(f"[bold]ABS Replay demo through Airflow[/] in {home} (SQLite catalog and Airflow database, "
                  f"spark_default -> {settings.spark_master})")
    ctx, data, input_dir = demo_catalog(settings)
    # Spark's classes archived once, for this demo's runs and every later one, while Airflow migrates its
    # database and the first barriers run
    with ThreadPoolExecutor(1) as pool:
        archived = pool.submit(make_jvm_archive, settings)
        migrate_airflow_db(env, logs / "airflow-db-migrate.log")
        t0 = time.perf_counter()
        for batch in range(batches):
            landed = data.land(input_dir, batch, lines_per_batch)
            log = logs / f"{batch:02d}-abs_{JOB}_barriers.log"
            before = ctx.store.job(JOB).last_checkpoint_id
            if not run_dag(env, f"abs_{JOB}_barriers", log):
                raise AbsError(f"abs_{JOB}_barriers failed; see {log}")
            after = ctx.store.job(JOB).last_checkpoint_id
            barrier = f"barrier {after} injected" if after > before else "barrier skipped by the checkpoint policy"
            console.print(f"batch {batch}: {landed:,} records landed; abs_{JOB}_barriers: {barrier}")
            if batch % 2 == 1 or batch == batches - 1:
                if archived is not None and (line := archived.result()) is not None:
                    console.print(line)
                archived = None
                log = logs / f"{batch:02d}-abs_{JOB}_epochs.log"
                console.print(f"abs_{JOB}_epochs: SparkSubmitOperator runs spark_jobs/process.py, then finalize...")
                if not run_dag(env, f"abs_{JOB}_epochs", log):
                    raise AbsError(f"abs_{JOB}_epochs failed; see {log}")
                exact, records, keys = check_exact(ctx)
                console.print(f"  sink {'equals' if exact else 'DIFFERS FROM'} the reference "
                              f"({records:,} records, {keys:,} keys)")
    return finish_demo(console, ctx, t0, f"; Airflow's task logs are in {logs}")
