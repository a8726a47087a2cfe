"""An operator's keyed state at a retained (completed) checkpoint as a Spark DataFrame, for notebooks and jobs:

    from spark_jobs.state_frame import state_dataframe
    df = state_dataframe(spark, JOB, 812, OPERATOR)        # verified like a restore
    df.where(df[KEY] == value).show()

The same chain of files a recovery restores, with every file's rows and checksum checked
against its ack (StateIntegrityError names a bad one); the pyarrow reader behind
`absreplay state` (coordinator.checkpoints.state_reader) gives the same rows without a JVM.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from coordinator.catalog.db import ensure_migrated, make_engine
from coordinator.dataflow.discovery import get_job
from coordinator.settings import Settings
from coordinator.checkpoints.state_reader import check_operator, check_retained
from coordinator.checkpoints.store import CheckpointStore
from spark_jobs.run.runner import EpochRunner


def state_dataframe(spark: SparkSession, job: str, checkpoint_id: int, operator: str | None = None,
                    settings: Settings | None = None) -> DataFrame:
    """The state of ``operator`` (default: the job's keyed operator) at ``checkpoint_id``."""
    settings = settings or Settings.from_env()
    definition = get_job(job)
    check_operator(definition, operator)
    engine = make_engine(settings.database_url)
    ensure_migrated(engine)
    store = CheckpointStore(engine)
    check_retained(store, job, checkpoint_id)
    runner = EpochRunner(spark, store, definition, settings.data_dir, settings.state_uri)
    return runner.restore(checkpoint_id).states[check_operator(definition, operator)]
