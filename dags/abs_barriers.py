"""``abs_<job>_barriers``: inject a barrier into every registered job on its interval.

Wiring only; the work is ``absreplay.airflow.orchestration.inject_barrier``. The DAG
never waits for processing: a barrier is a cheap catalog row (the cut), and a
successful injection emits the job's barrier asset, which schedules
``abs_<job>_epochs``. A barrier the checkpoint policy skips (too many pending,
minimum pause) ends the task as skipped and emits no asset event.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import DAG, dag, task
from airflow.sdk.exceptions import AirflowSkipException

from absreplay.airflow import orchestration
from coordinator.dataflow.discovery import jobs_for_dags
from coordinator.dataflow.jobs import JobDefinition

START = datetime(2025, 1, 1, tzinfo=timezone.utc)

DOC = """
### Barriers of `{job}`

Every {minutes} minute(s) this DAG injects barrier *n* into job `{job}` ({description}):
it records the cut (the end offset of every source partition) as a PENDING
checkpoint and emits the asset `{asset}`, which triggers `abs_{job}_epochs`.
It never waits for processing, so barriers keep coming while processing is
slow or down; the next epochs run processes all of them, in order.

A barrier skipped by the checkpoint policy (`max_concurrent_pending`,
`min_pause_ms`) marks the task *skipped*; its records belong to the next barrier.
A barrier whose new records hold more dead letters than the job's
`max_dead_letter_share` marks the task *failed*, without retry: the barrier is
registered (records and dead letters in the catalog), no asset event is
emitted, so the next barrier's run processes its epoch; the log names the share
and the first reason.

Catalog: the Variable `abs_database_url`, else `ABS_DATABASE_URL`.
Audit: `SELECT * FROM snapshot_history WHERE job = '{job}'`.
"""


def barriers_dag(job: JobDefinition) -> DAG:
    asset = orchestration.barrier_asset(job.name)

    @dag(
        dag_id=f"abs_{job.name}_barriers",
        schedule=timedelta(minutes=job.barrier_interval_minutes),
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["absreplay", job.name, "barriers", *(["weak consistency"] if job.consistency == "weak" else [])],
        default_args={"owner": "absreplay", "retries": 2, "retry_delay": timedelta(seconds=30)},
        doc_md=orchestration.weak_note(job) + DOC.format(
            job=job.name, minutes=job.barrier_interval_minutes, description=job.description, asset=asset.name),
    )
    def barriers() -> None:
        @task(outlets=[asset])
        def inject_barrier(outlet_events: Any = None) -> dict[str, Any]:
            barrier = orchestration.run_in_task(orchestration.inject_barrier, job.name)
            if barrier["checkpoint_id"] is None:
                raise AirflowSkipException(barrier["message"])
            print(barrier["message"])
            outlet_events[asset].extra = barrier
            return barrier

        inject_barrier()

    return barriers()


for _job in jobs_for_dags():
    globals()[f"abs_{_job.name}_barriers"] = barriers_dag(_job)
