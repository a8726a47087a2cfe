"""Back-edge log n as Parquet: written with checkpoint n, read back (and checked) on restore.

Layout: ``<state root>/<job>/chk-<n>/<loop tail>/subtask=<i>/part-*.parquet``,
the records routed to subtask i of the loop head (the same key groups as keyed
state, so the log of head subtask i sits beside its state). A restore reads
every file of the checkpoint, whatever the parallelism it was taken at. Rows and a
checksum per subtask (XOR of xxhash64 over the rows, as for keyed state) are
observed in the pass that writes the files; the catalog rows
(``coordinator.checkpoints.back_edge_logs``) are recorded with the acks. Restoring reads
every file the catalog lists, observes the same figures and compares them: a
missing, unreadable or altered file stops the restore with a
``StateIntegrityError`` naming the file and the checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Observation, SparkSession

from coordinator.checkpoints import back_edge_logs, state_files
from coordinator.checkpoints.back_edge_logs import BackEdgeLogHandle
from coordinator.checkpoints.store import CheckpointStore
from coordinator.dataflow.jobs import JobDefinition
from coordinator.errors import StateIntegrityError
from spark_jobs.state import keyed_state
from spark_jobs.operators.dataflow import Dataflow as LoopOperators


def empty(spark: SparkSession, ops: LoopOperators) -> DataFrame:
    return spark.createDataFrame([], ops.back_edge_schema)


def write(
    spark: SparkSession, log: DataFrame, job: JobDefinition, ops: LoopOperators, state_uri: str, checkpoint_id: int,
    max_parallelism: int,
) -> list[BackEdgeLogHandle]:
    """Write back-edge log ``checkpoint_id``; returns one handle per loop-tail subtask (empty ones too)."""
    p, tail = job.parallelism, job.loop_tail
    assert tail is not None, f"job {job.name!r} has no loop"
    columns = ops.back_edge_schema.fieldNames()
    rows = keyed_state.with_subtask(log.select(*columns), ops.back_edge_key, p, max_parallelism)
    observation = Observation(f"back-edge-{checkpoint_id}")
    observed = rows.observe(observation, *keyed_state.group_metrics(columns, keyed_state.SUBTASK, p))
    op_uri = state_files.operator_dir(state_uri, job.name, checkpoint_id, tail)
    keyed_state.write_snapshot(observed, op_uri)
    stats = keyed_state.stats_from_metrics(observation.get, p)
    handles = []
    for i in range(p):
        n = stats[i].rows
        uri = f"{op_uri}/subtask={i}" if n else None
        handles.append(
            BackEdgeLogHandle(
                operator=tail, subtask=i, uri=uri, records=n,
                bytes=keyed_state.bytes_under(spark, uri) if uri else 0,
                checksum=stats[i].checksum if n else None,
            )
        )
    return handles


def restore(
    spark: SparkSession, store: CheckpointStore, job: JobDefinition, ops: LoopOperators, checkpoint_id: int,
) -> tuple[DataFrame, int]:
    """Back-edge log ``checkpoint_id``, checked against its catalog rows, and its record count."""
    handles = back_edge_logs.of_checkpoint(store.sessions, job.name, checkpoint_id)
    if not handles:
        raise StateIntegrityError(
            f"checkpoint {checkpoint_id} of job {job.name!r} has no back-edge log in the catalog "
            "(back_edge_logs); a checkpoint of a job with a loop cannot be restored without it"
        )
    stored = [h for h in handles if h.records > 0]
    if not stored:
        return empty(spark, ops), 0
    return read_checked(spark, ops, checkpoint_id, stored), sum(h.records for h in stored)


def read_checked(
    spark: SparkSession, ops: LoopOperators, checkpoint_id: int, stored: Sequence[BackEdgeLogHandle],
) -> DataFrame:
    schema = ops.back_edge_schema
    data, observation = keyed_state.read_observed(
        spark, schema, [(h.uri, f"back-edge log file {h.uri} of checkpoint {checkpoint_id}") for h in stored],
        f"restore-back-edge-{checkpoint_id}",
    )
    try:
        log = data.drop("_link").localCheckpoint(eager=True)
    except Exception as exc:  # noqa: BLE001 - a corrupt Parquet file surfaces here
        uris = ", ".join(h.uri or "" for h in stored)
        raise StateIntegrityError(
            f"cannot read back-edge log files {uris} of checkpoint {checkpoint_id}: {str(exc).splitlines()[0]}"
        ) from None
    found = keyed_state.stats_from_metrics(observation.get, len(stored))
    for i, h in enumerate(stored):
        rows, checksum = found[i].rows, found[i].checksum or None
        if rows != h.records or checksum != h.checksum:
            raise StateIntegrityError(
                f"back-edge log file {h.uri} of checkpoint {checkpoint_id} is corrupt: {rows} records with "
                f"checksum {checksum}, catalog says {h.records} records with {h.checksum}"
            )
    return log
