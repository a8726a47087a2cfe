"""``ProcessingRun``: the epochs DAG's ``process_epochs`` task, ``spark_jobs/process.py`` of one job through
spark-submit (a SparkSubmitOperator that knows its job).

- **Lineage:** when it succeeds, the OpenLineage provider's listener asks it for the job's sources and
  sinks (``lineage.lineage``).
- **Spark's classes from an archive:** its driver maps the archive of Spark's classes the command line's
  runs map (``absreplay.commands.jvm_archive``: ``$ABS_JVM_ARCHIVE``, by default ``$ABS_HOME/jvm``), or,
  when there is none yet, dumps it as it exits; the dump is put in place once the run succeeded. Only
  when the driver runs on this machine: in cluster deploy mode it runs on a host of the cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from absreplay.commands import jvm_archive

DRIVER_OPTIONS = "spark.driver.extraJavaOptions"


class ProcessingRun(SparkSubmitOperator):
    """``spark_jobs/process.py`` of one job through spark-submit, reporting the job's lineage."""

    def __init__(self, *, job_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name

    def execute(self, context: Any) -> None:
        ended: Callable[[int], None] = lambda _code: None
        if self._get_hook()._connection["deploy_mode"] != "cluster":  # else the driver runs on a cluster host
            from absreplay.airflow.orchestration import airflow_settings

            options, ended = jvm_archive.for_run(airflow_settings())
            if options:
                self.conf = {**(self.conf or {}),
                             DRIVER_OPTIONS: f"{(self.conf or {}).get(DRIVER_OPTIONS, '')} {options}".strip()}
        try:
            super().execute(context)  # its own hook, with the options above
        except BaseException:
            ended(1)
            raise
        ended(0)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from absreplay.airflow.lineage import lineage
        from absreplay.airflow.orchestration import airflow_settings
        from coordinator.dataflow.discovery import get_job

        return lineage(get_job(self.job_name), airflow_settings())
