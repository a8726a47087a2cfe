"""`verify`: recompute a checkpoint's state from the sources alone and compare it with the stored snapshot.

    spark-submit spark_jobs/verify.py JOB [--checkpoint N]

The stored side is the checkpoint restored from its snapshot files (checksums
of every file checked on the way). The recomputed side runs the job's
operators over every record before the checkpoint's cut, from empty state, in
one epoch. They are compared per subtask (at the parallelism the checkpoint was
taken at) on (key, values) — checksums first, then, where they differ, row by
row. Exit 0 when equal, 1 with the first differences, 2 for bad input (a source
segment changed or deleted since inject is named: the sources, not the state,
would differ), 3 when it could not check (a state file missing or corrupt, the
catalog or Spark failing): "differs" and "could not tell" are never the same answer.

A job with a loop (connected_components) stores, at checkpoint n, state n and
back-edge log n, and state n alone depends on how many rounds each epoch ran.
What the pair means does not: fed back into the loop and run until nothing
circulates, it must give exactly the fixpoint of every record before the cut.
So the stored side is state n with log n run to quiescence, and the recomputed
side is the job's ``step`` (the loop run to its fixpoint) over the records.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator import rescale, segment_changes
from coordinator.catalog.db import ensure_migrated, make_engine
from coordinator.errors import as_user_error, AbsError, CheckpointNotFoundError, UsageError
from absreplay.job_discovery import get_job
from coordinator.jobs import JobDefinition
from coordinator.lifecycle import CheckpointStatus
from coordinator.settings import Settings
from coordinator.store import CheckpointStore
from spark_jobs import iterate, keyed_state
from spark_jobs.epoch_source import read_epoch
from spark_jobs.progress import Steps
from spark_jobs.runner import EpochRunner

MAX_DIFFERENCES = 10
#: exit code: the comparison could not be made (bad input is 2, a difference 1)
COULD_NOT_CHECK = 3


@dataclass
class VerifyReport:
    checkpoint_id: int
    stored_rows: int
    recomputed_rows: int
    subtasks_differing: list[int] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not self.subtasks_differing and not self.differences


def _stats(df: DataFrame, key: str, columns: list[str], parallelism: int,
           max_parallelism: int) -> dict[int, tuple[int, str | None]]:
    rows = (
        keyed_state.with_subtask(df.select(*columns), key, parallelism, max_parallelism)
        .groupBy(keyed_state.SUBTASK)
        .agg(F.count(F.lit(1)).alias("n"), F.bit_xor(F.xxhash64(*columns)).alias("x"))
        .collect()
    )
    return {int(r[keyed_state.SUBTASK]): (int(r["n"]), keyed_state.format_checksum(r["x"])) for r in rows}


def verify(spark: SparkSession, store: CheckpointStore, job: JobDefinition, settings: Settings,
           checkpoint_id: int | None = None) -> VerifyReport:
    if checkpoint_id is None:
        latest = store.latest_completed(job.name)
        if latest is None:
            raise CheckpointNotFoundError(job.name, 0, "has no completed checkpoint to verify")
        checkpoint_id = latest.checkpoint_id
    ck = store.checkpoint(job.name, checkpoint_id)
    if ck.status != CheckpointStatus.COMPLETED:
        raise CheckpointNotFoundError(job.name, checkpoint_id, f"is {ck.status}; only COMPLETED checkpoints can be verified")
    job = job.with_parallelism(rescale.taken_at(store, job.name, checkpoint_id, job.state_operator))
    runner = EpochRunner(spark, store, job, settings.data_dir, settings.state_uri)
    with Steps(2, f"{job.name}: verify checkpoint {checkpoint_id}") as steps:
        t0 = time.perf_counter()
        restored = runner.restore(checkpoint_id)
        stored = restored.state
        if restored.back_edge is not None:
            stored = iterate.quiesce(runner.ops, stored, restored.back_edge, checkpoint_id)
        steps.done(f"  [1/2] restored and checked checkpoint {checkpoint_id} in {time.perf_counter() - t0:.2f}s")
        t0 = time.perf_counter()
        cut = store.cut(job.name, checkpoint_id)
        plan = runner.plan_range({}, cut, checkpoint_id)
        # every segment from the start of the sources, those that source retention allowed deleting too
        segment_changes.check_before_run(runner.input_dir,
                                         [(f"(read to verify checkpoint {checkpoint_id})", plan.segments)])
        records = read_epoch(spark, runner.input_dir, plan.segments, plan.dead_offsets)
        empty = spark.createDataFrame([], runner.ops.state_schema)
        recomputed = runner.ops.step(empty, records, checkpoint_id).localCheckpoint(eager=True)
        steps.done(f"  [2/2] recomputed it from {plan.records:,} source records in {time.perf_counter() - t0:.2f}s")

    ops = runner.ops
    columns = [c for c in ops.state_schema.fieldNames() if c != "updated"]  # when a row changed is not content
    groups = (job.parallelism, runner.max_parallelism)
    left, right = _stats(stored, ops.key, columns, *groups), _stats(recomputed, ops.key, columns, *groups)
    report = VerifyReport(checkpoint_id, sum(n for n, _ in left.values()), sum(n for n, _ in right.values()))
    report.subtasks_differing = sorted(i for i in set(left) | set(right) if left.get(i) != right.get(i))
    if report.subtasks_differing:
        s, r = stored.select(*columns).alias("s"), recomputed.select(*columns).alias("r")
        values = [c for c in columns if c != ops.key]
        differs = F.lit(False)
        for c in values:
            differs = differs | ~F.col(f"s.{c}").eqNullSafe(F.col(f"r.{c}"))
        joined = s.join(r, F.col(f"s.{ops.key}") == F.col(f"r.{ops.key}"), "full_outer")
        diff = joined.where(F.col(f"s.{ops.key}").isNull() | F.col(f"r.{ops.key}").isNull() | differs)
        key = F.coalesce(F.col(f"s.{ops.key}"), F.col(f"r.{ops.key}")).alias("k")
        for row in diff.select(key, *[F.col(f"s.{c}").alias(f"stored_{c}") for c in values],
                               *[F.col(f"r.{c}").alias(f"recomputed_{c}") for c in values]
                               ).orderBy("k").limit(MAX_DIFFERENCES).collect():
            stored_v = ", ".join(f"{c}={row[f'stored_{c}']}" for c in values)
            recomputed_v = ", ".join(f"{c}={row[f'recomputed_{c}']}" for c in values)
            report.differences.append(f"{ops.key}={row['k']!r}: stored {stored_v}; recomputed {recomputed_v}")
    return report


def run(argv: list[str], spark: SparkSession | None = None) -> int:
    """The application; exit code. ``spark``: run on this session and leave it open (tests, notebooks),
    else start one and stop it at the end."""
    parser = argparse.ArgumentParser(prog="verify", description=__doc__)
    parser.add_argument("job")
    parser.add_argument("--checkpoint", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()
        job = get_job(args.job)
        engine = make_engine(settings.database_url)
        ensure_migrated(engine)
        store = CheckpointStore(engine)
        own_session = spark is None
        if own_session:
            from spark_jobs.session import build_session

            spark = build_session(f"absreplay-verify-{job.name}", job.parallelism)
        try:
            report = verify(spark, store, job, settings, args.checkpoint)
        finally:
            if own_session:
                spark.stop()
    except AbsError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code if isinstance(exc, UsageError) else COULD_NOT_CHECK
    except Exception as exc:  # noqa: BLE001 - Spark, the catalog: whatever failed, the answer is "could not check"
        error = as_user_error(exc)
        what = str(error) if error else f"{exc.__class__.__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        print(f"error: could not check: {what}", file=sys.stderr, flush=True)
        return COULD_NOT_CHECK
    if report.equal:
        print(f"{job.name}: checkpoint {report.checkpoint_id} verified: the stored state equals a recomputation "
              f"from the sources ({report.stored_rows:,} rows, checksums equal on every subtask)", flush=True)
        return 0
    print(f"{job.name}: checkpoint {report.checkpoint_id} DIFFERS from a recomputation from the sources: "
          f"{report.stored_rows:,} stored rows, {report.recomputed_rows:,} recomputed; "
          f"subtasks {report.subtasks_differing} differ; first differences:", flush=True)
    for line in report.differences:
        print(f"  {line}", flush=True)
    return 1


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
