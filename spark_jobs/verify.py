"""`verify`: recompute a checkpoint's state from the sources alone and compare it with the stored snapshot.

    spark-submit spark_jobs/verify.py JOB [--checkpoint N]

The stored side is the checkpoint restored from its snapshot files (checksums
of every file checked on the way). The recomputed side runs the job's
operators over every record before the checkpoint's cut, from empty state, in
one epoch. The sources' dead letters (inject's) are left out, a window's late
records are read: they were dead for the window alone, which finds them late
again, while an aggregate reading the same source counts them. They are
compared per subtask (at the parallelism the checkpoint was taken at) on
(key, values) — checksums first, then, where they differ, row by
row. Exit 0 when equal, 1 with the first differences, 2 for bad input (a source
segment changed or deleted since inject is named: the sources, not the state,
would differ), 3 when it could not check (a state file missing or corrupt, the
catalog or Spark failing): "differs" and "could not tell" are never the same answer.

A job with a loop (an iterate operator) stores, at checkpoint n, state n and
back-edge log n, and state n alone depends on how many rounds each epoch ran.
What the pair means does not: fed back into the loop and run until nothing
circulates, it must give exactly the fixpoint of every record before the cut.
So the stored side is state n with log n run to quiescence, and the recomputed
side is the job's ``step`` (the loop run to its fixpoint) over the records.
"""

from __future__ import annotations

import spark_jobs.python_path  # noqa: F401, I001 - first: pyspark's bytecode, not Spark's zip (see there)

import argparse
import sys
import time
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator.checkpoints import rescale, run_plan, weak
from coordinator.catalog import epochs as catalog_epochs
from coordinator.catalog.db import ensure_migrated, make_engine
from coordinator.errors import as_user_error, AbsError, CheckpointNotFoundError, UsageError
from coordinator.dataflow.discovery import get_job
from coordinator.arguments import parse, positive_arg
from coordinator.dataflow.jobs import JobDefinition
from coordinator.checkpoints.lifecycle import CheckpointStatus
from coordinator.settings import Settings
from coordinator.checkpoints.store import CheckpointStore
from coordinator.dataflow.graph import KEYED_KINDS, OperatorKind
from spark_jobs.state import keyed_state
from spark_jobs.state.frames.frame_state import FrameState
from spark_jobs.operators import deletes, ttl
from spark_jobs.operators.dataflow import Dataflow
from spark_jobs.run.progress import Steps
from spark_jobs.run.runner import EpochRunner
from spark_jobs.operators.keyed_operators import materialized

MAX_DIFFERENCES = 10
#: exit code: the comparison could not be made (bad input is 2, a difference 1)
COULD_NOT_CHECK = 3


@dataclass
class VerifyReport:
    checkpoint_id: int
    stored_rows: int
    recomputed_rows: int
    #: "operator#subtask"
    subtasks_differing: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not self.subtasks_differing and not self.differences


def _stats(df: DataFrame, key: tuple[str, ...], columns: list[str], parallelism: int,
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
    flow = runner.flow
    with Steps(2, f"{job.name}: verify checkpoint {checkpoint_id}") as steps:
        t0 = time.perf_counter()
        restored = runner.restore(checkpoint_id)
        stored = dict(restored.states)
        if restored.back_edge is not None:
            op = flow.loop.name
            stored[op] = flow.quiesce(spark, stored[op], restored.back_edge, checkpoint_id)
        steps.done(f"  [1/2] restored and checked checkpoint {checkpoint_id} in {time.perf_counter() - t0:.2f}s")
        t0 = time.perf_counter()
        recomputed, records, epochs = recompute(spark, store, runner, checkpoint_id)
        steps.done(f"  [2/2] recomputed it from {records:,} source records in {epochs} epoch(s) "
                   f"in {time.perf_counter() - t0:.2f}s")
    report = VerifyReport(checkpoint_id, 0, 0)
    for spec in job.states:
        # a restore drops tombstones (keys that left the state): the recomputation's are dropped too
        compare(spec.operator, spec.key, spec.identity, stored[spec.operator], deletes.live(recomputed[spec.operator]),
                (job.parallelism, runner.max_parallelism), report)
    return report


def recompute(spark: SparkSession, store: CheckpointStore, runner: EpochRunner,
              checkpoint_id: int) -> tuple[dict[str, DataFrame], int, int]:
    """Every operator's state at ``checkpoint_id`` from the sources alone: one epoch over every record
    when the result does not depend on where epochs end (aggregates of records, a loop run to its
    fixpoint), else the same epochs again (windows, joins, process functions, and a keyed operator fed
    by another's changes). Returns (states, records read, epochs run)."""
    job, flow = runner.job, runner.flow
    exact = any(st.kind in (OperatorKind.WINDOW, OperatorKind.JOIN, OperatorKind.INTERVAL_JOIN, OperatorKind.PROCESS)
                for st in job.states) or \
        fed_by_keyed(flow)
    exact = exact or ttl.has_ttl(flow.spec.nodes)  # a state TTL counts epochs
    epochs = catalog_epochs.lineage(store, job.name, checkpoint_id, "its windows and joins cannot be replayed "
                                    "exactly") if exact else [checkpoint_id]
    # always the DataFrame engine: the run's stores are checked against an independent path
    states = {st.operator: FrameState(st.operator, flow.empty_state(spark, st.operator)) for st in job.states}
    watermarks: dict[str, int | None] = {}
    back_edge = None
    start: dict[str, int] = {}
    total = 0
    flow.expiry.start([])  # the lineage so far, for a state TTL: each epoch joins it (``finish``)
    for n in epochs:
        cut = store.cut(job.name, n)
        plan = runner.plan_range(start, cut, n)
        # every segment from the start of the sources, those that source retention allowed deleting too
        runner.check_reads([(f"of epoch {barrier} (read to verify checkpoint {checkpoint_id})", segments)
                            for barrier, segments in run_plan.by_barrier(store, job.name, plan.segments).items()])
        out = flow.epoch(spark, states, runner.read_records(plan), back_edge, watermarks, n,
                         job.loop_rounds if exact else None)
        states = {op: FrameState(op, materialized(st.rows(spark), False))  # the operators' copies, mostly
                  for op, st in out.states.items()}
        flow.expiry.finish(n)
        watermarks.update(out.watermarks)
        back_edge, start, total = out.back_edge, cut, total + plan.records
    return {op: st.rows(spark) for op, st in states.items()}, total, len(epochs)


def fed_by_keyed(flow: Dataflow) -> bool:
    """A keyed operator consumes another's output: that output is the keys each epoch changed, so
    what the consumer receives (a key changed in two epochs arrives twice) depends on where epochs end."""
    keyed = {n.name for n in flow.spec.nodes if n.kind in (*KEYED_KINDS, OperatorKind.ITERATE)}

    def upstream_keyed(name: str) -> bool:
        node = flow.nodes[name]
        return any(i in keyed or upstream_keyed(i) for i in node.inputs)

    return any(upstream_keyed(name) for name in keyed)


def compare(operator: str, key: tuple[str, ...], identity: tuple[str, ...], stored: DataFrame,
            recomputed: DataFrame, groups: tuple[int, int], report: VerifyReport) -> None:
    """Per subtask checksums first, then, where they differ, the first rows that do."""
    columns = [c for c in stored.columns if c != "updated"]  # when a row changed is not content
    left, right = _stats(stored, key, columns, *groups), _stats(recomputed.select(*stored.columns), key, columns,
                                                                 *groups)
    report.stored_rows += sum(n for n, _ in left.values())
    report.recomputed_rows += sum(n for n, _ in right.values())
    differing = sorted(i for i in set(left) | set(right) if left.get(i) != right.get(i))
    report.subtasks_differing += [f"{operator}#{i}" for i in differing]
    if not differing:
        return
    s, r = stored.select(*columns).alias("s"), recomputed.select(*columns).alias("r")
    values = [c for c in columns if c not in identity]
    differs = F.lit(False)
    for c in values:
        differs = differs | ~F.col(f"s.{c}").eqNullSafe(F.col(f"r.{c}"))
    on = F.lit(True)
    for c in identity:
        on = on & F.col(f"s.{c}").eqNullSafe(F.col(f"r.{c}"))
    joined = s.join(r, on, "full_outer")
    missing = F.col(f"s.{identity[0]}").isNull() | F.col(f"r.{identity[0]}").isNull()
    ident = [F.coalesce(F.col(f"s.{c}"), F.col(f"r.{c}")).alias(f"k_{c}") for c in identity]
    rows = joined.where(missing | differs).select(
        *ident, *[F.col(f"s.{c}").alias(f"stored_{c}") for c in values],
        *[F.col(f"r.{c}").alias(f"recomputed_{c}") for c in values],
    ).orderBy(*[f"k_{c}" for c in identity]).limit(MAX_DIFFERENCES).collect()
    for row in rows:
        who = ", ".join(f"{c}={row[f'k_{c}']!r}" for c in identity)
        stored_v = ", ".join(f"{c}={row[f'stored_{c}']}" for c in values)
        recomputed_v = ", ".join(f"{c}={row[f'recomputed_{c}']}" for c in values)
        report.differences.append(f"{operator}: {who}: stored {stored_v}; recomputed {recomputed_v}")


def run(argv: list[str], spark: SparkSession | None = None) -> int:
    """The application; exit code. ``spark``: run on this session and leave it open (tests, notebooks),
    else start one and stop it at the end."""
    parser = argparse.ArgumentParser(prog="verify", description=__doc__, exit_on_error=False)
    parser.add_argument("job")
    parser.add_argument("--checkpoint", type=positive_arg, default=None)
    try:
        args = parse(parser, argv)
        settings = Settings.from_env()
        job = get_job(args.job)
        weak.refuse(job, "verify")
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
