"""``abs_maintenance``: expire stale pending checkpoints and collect unreferenced state, for every job.

Wiring only: one mapped task per job registered in the catalog, each calling
``absreplay.airflow.orchestration.maintain_job``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import dag, task

from absreplay.airflow import orchestration

DOC = """
### Maintenance of every ABS Replay job

Hourly, for every job registered in the catalog (one mapped task each):

- **expire** PENDING checkpoints older than the job's `timeout_ms` (they become
  FAILED with reason TIMEOUT and their staged sink output is aborted at the next finalize);
- **collect garbage**: delete checkpoint directories under the state root that
  no catalog row references (PENDING checkpoints and the incremental chains of
  COMPLETED ones are kept).

Catalog: the Variable `abs_database_url`, else `ABS_DATABASE_URL`.
"""


@dag(
    dag_id="abs_maintenance",
    schedule=timedelta(hours=1),
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    tags=["absreplay", "maintenance"],
    default_args={"owner": "absreplay", "retries": 1, "retry_delay": timedelta(minutes=5)},
    doc_md=DOC,
)
def abs_maintenance() -> None:
    @task
    def catalog_jobs() -> list[str]:
        return orchestration.run_in_task(orchestration.catalog_jobs)

    @task
    def maintain(job: str) -> dict[str, Any]:
        report = orchestration.run_in_task(orchestration.maintain_job, job)
        print(report["message"])
        return report

    maintain.expand(job=catalog_jobs())


abs_maintenance()
