"""``abs_<job>_epochs``: process every injected, unprocessed epoch, then finalize the checkpoints.

Wiring only. Scheduled on the job's barrier asset, one run at a time: a run
replays all pending epochs in order (catch-up), so barriers injected while a
run was busy or failing are processed by the next one. A SparkSubmitOperator
(``processing_run.ProcessingRun``, which reports the job's sources and sinks to
OpenLineage; connection ``spark_default``, whose host/port give the master)
runs ``spark_jobs/process.py``; the project's code travels as a ``--py-files`` zip
and the catalog settings reach the driver as environment variables. Every
runtime value (zip, Python, settings) is rendered when the task runs, through
the macros of ``orchestration.spark_submit_macros``, never at parse time.
``finalize`` emits an event of each sink's asset it committed to, through the job's
alias (``sink_assets.sink_alias``), and none for a sink it committed nothing to.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import DAG, Param, dag, task

from absreplay.airflow import orchestration, sink_assets
from absreplay.airflow.processing_run import ProcessingRun
from absreplay.commands.submit import PROCESS_APP
from coordinator.dataflow.discovery import jobs_for_dags
from coordinator.dataflow.jobs import JobDefinition

START = datetime(2025, 1, 1, tzinfo=timezone.utc)

DOC = """
### Epochs of `{job}`

Triggered by the asset `{asset}` (every barrier `abs_{job}_barriers` injects).
At most one run is active; it replays **every** pending epoch in order, from
the state of the latest completed checkpoint:

1. `process_epochs` — `spark-submit spark_jobs/process.py {job} --snapshot-mode <mode>`
   through the connection `spark_default` (its host and port are the master,
   its extra may set `deploy-mode`). The code goes along as a `--py-files` zip
   of `coordinator` and `spark_jobs`; `ABS_DATABASE_URL`, `ABS_DATA_DIR`,
   `ABS_STATE_URI`, `ABS_HOME`, `ABS_PARALLELISM` go to the driver as `env_vars` (YARN / Kubernetes
   cluster mode: `spark.yarn.appMasterEnv.*` / `spark.kubernetes.driverEnv.*`). The run's
   parallelism is the worker's `ABS_PARALLELISM`, else the job's own; a change redistributes
   the state by key groups.
   Its lineage (sources in, sinks out, with their schemas) goes to OpenLineage when the
   provider's transport is configured (`[openlineage] transport`).
2. `finalize` — commit the sinks of completed checkpoints, abort failed ones',
   expire timed-out checkpoints, apply retention, delete unreferenced state.
   Every sink that received a commit gets one event of its asset (through the alias
   `{alias}`): its URI is the sink's location, its extra the checkpoints committed,
   `rows` and `high_water_marks`. A finalize that committed nothing emits nothing.

Param `snapshot_mode`: `async` (ABS, default), `sync` (stop-the-world) or `none`.
"""


def epochs_dag(job: JobDefinition) -> DAG:
    asset = orchestration.barrier_asset(job.name)

    @dag(
        dag_id=f"abs_{job.name}_epochs",
        schedule=[asset],
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["absreplay", job.name, "epochs", *(["weak consistency"] if job.consistency == "weak" else [])],
        default_args={"owner": "absreplay", "retries": 1, "retry_delay": timedelta(minutes=1)},
        params={
            "snapshot_mode": Param(
                orchestration.SNAPSHOT_MODES[0],
                type="string",
                enum=list(orchestration.SNAPSHOT_MODES),
                title="Snapshot mode",
                description="async: ABS (default); sync: stop-the-world; none: no snapshot (baseline)",
            ),
        },
        user_defined_macros=orchestration.spark_submit_macros(),
        doc_md=orchestration.weak_note(job) + DOC.format(job=job.name, asset=asset.name,
                                                         alias=sink_assets.sink_alias_name(job.name)),
    )
    def epochs() -> None:
        process = ProcessingRun(
            job_name=job.name,
            task_id="process_epochs",
            conn_id="spark_default",
            application=str(PROCESS_APP),
            application_args=orchestration.process_args(job.name, "{{ params.snapshot_mode }}"),
            py_files="{{ abs_py_files() }}",
            conf={**orchestration.python_conf("{{ abs_python() }}"), "spark.log.level": "WARN"},
            env_vars={key: f"{{{{ abs_setting('{key}') }}}}" for key in orchestration.DRIVER_ENV},
            name=f"absreplay-{job.name}",
        )

        @task(outlets=[sink_assets.sink_alias(job.name)])
        def finalize(outlet_events: Any = None) -> dict[str, Any]:
            report = orchestration.run_in_task(orchestration.finalize_checkpoints, job.name)
            print(report["message"])
            sink_assets.publish_sink_commits(outlet_events, job.name, report["sink_commits"])
            return report

        process >> finalize()

    return epochs()


for _job in jobs_for_dags():
    globals()[f"abs_{_job.name}_epochs"] = epochs_dag(_job)
