"""The processing application (run with spark-submit, or `absreplay process`).

    spark-submit spark_jobs/process.py JOB [--snapshot-mode async|sync|none] [--parallelism N]
                                           [--restore-from N] [--metrics-out FILE]
                                           [--recover|--rewind|--upgrade [--checkpoint N] [--mode full|partial]
                                            [--fallback]]

Settings come from the environment (ABS_DATABASE_URL, ABS_DATA_DIR,
ABS_STATE_URI; ABS_PARALLELISM when --parallelism is not given).
Exit codes: 0 ok, 2 bad input, 1 failure.
"""

from __future__ import annotations

import spark_jobs.python_path  # noqa: F401, I001 - first: pyspark's bytecode, not Spark's zip (see there)

import argparse
import json
import sys
from contextlib import ExitStack, nullcontext
from dataclasses import asdict
from functools import partial
from typing import TYPE_CHECKING

from coordinator.checkpoints import recovery, rescale, run_plan, weak
from coordinator.upgrades import job_plan
from coordinator.catalog.db import ensure_migrated, make_engine
from coordinator.errors import as_user_error
from coordinator.dataflow.discovery import get_job
from coordinator.arguments import parse, positive_arg
from coordinator.checkpoints.lease import RUN_LEASE_WAIT_S, processing_lease
from coordinator.modes import RecoveryKind, RecoveryMode, RecoveryRequest, SnapshotMode
from coordinator.settings import Settings
from coordinator.checkpoints.store import CheckpointStore

if TYPE_CHECKING:  # pyspark is imported only once there is work to do
    from pyspark.sql import SparkSession


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="process", description=__doc__, exit_on_error=False)
    parser.add_argument("job")
    parser.add_argument("--snapshot-mode", choices=[m.value for m in SnapshotMode], default=SnapshotMode.ASYNC.value)
    parser.add_argument("--parallelism", type=positive_arg, default=None,
                        help="run every operator at N subtasks (default: ABS_PARALLELISM, else the job's own)")
    parser.add_argument("--restore-from", type=positive_arg, default=None)
    parser.add_argument("--max-epochs", type=positive_arg, default=None)
    parser.add_argument("--metrics-out", default=None)
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--recover", action="store_const", const="recover", dest="recovery")
    kind.add_argument("--rewind", action="store_const", const="rewind", dest="recovery")
    kind.add_argument("--upgrade", action="store_const", const="upgrade", dest="recovery",
                      help="to the job as declared now, replaying from --checkpoint N (default: the start)")
    parser.add_argument("--checkpoint", type=positive_arg, default=None)
    parser.add_argument("--mode", choices=[m.value for m in RecoveryMode], default=RecoveryMode.FULL.value)
    parser.add_argument("--fallback", action="store_true")
    parser.add_argument("--airflow-run-id", default=None, help="the recover DAG's run that asked (the recoveries row)")
    args = parse(parser, argv)
    # the modes as their types from here on
    args.snapshot_mode, args.mode = SnapshotMode(args.snapshot_mode), RecoveryMode(args.mode)
    return args


def run(argv: list[str], spark: SparkSession | None = None) -> int:
    """The application; exit code. ``spark``: run on this session and leave it open (tests, notebooks),
    else start one and stop it at the end."""
    try:
        return _run(parse_args(argv), spark)
    except Exception as exc:
        error = as_user_error(exc)
        if error is None:
            raise  # a bug of ours: its traceback is what a report needs
        print(f"error: {error}", file=sys.stderr, flush=True)
        return error.exit_code


def _run(args: argparse.Namespace, spark: SparkSession | None) -> int:
    settings = Settings.from_env()
    job = get_job(args.job)
    engine = make_engine(settings.database_url)
    ensure_migrated(engine)
    store = CheckpointStore(engine)
    store.register_job(job)
    # above the job's max_parallelism: exit 2 before Spark
    requested = settings.parallelism if args.parallelism is None else args.parallelism
    job = rescale.run_definition(store, job, requested)
    if args.recovery:
        weak.refuse(job, args.recovery)
    weak.check_run(job, args.snapshot_mode, args.restore_from)
    refusals = nullcontext
    if args.recovery:
        request = RecoveryRequest(RecoveryKind(args.recovery), args.mode, args.checkpoint, args.fallback,
                                  args.airflow_run_id)
        # checked again: a finalize may have subsumed the checkpoint (or a run taken the lease) since the command
        # line checked it, and this refusal too is a REFUSED row naming the run that asked
        refusals = partial(recovery.refusals_recorded, store, job.name, request.kind, request.mode,
                           request.checkpoint, request.airflow_run_id)
        with refusals():
            target = recovery.validate(store, job.name, request.kind, request.mode, request.checkpoint)  # exit 2
            if request.kind is not RecoveryKind.UPGRADE:  # a changed job: its plan, before Spark
                job_plan.check_unchanged(store, job, target)

    from spark_jobs.run.executor_loss import restarting_after_lost_executors
    from spark_jobs.recover import run_recovery
    from spark_jobs.run.runner import EpochRunner, log
    from spark_jobs.session import build_session

    mode = args.snapshot_mode
    with ExitStack() as leased:
        with refusals():
            token = leased.enter_context(processing_lease(engine, job.name, wait_s=RUN_LEASE_WAIT_S))
        store = store.fenced(token)  # from here on, a run whose lease was taken over cannot write
        # what the run does, read once under the lease (an unknown --restore-from: exit 2); nothing to do: no Spark
        plan = None if args.recovery else run_plan.read(store, job, args.restore_from, args.max_epochs)
        if plan is not None and not plan.epochs:
            print(f"{job.name}: no pending epochs after checkpoint {plan.restore_point or 0}", flush=True)
            return 0
        if plan is not None:
            job_plan.check_unchanged(store, job, plan.restore_point)  # a changed job: its plan, before Spark
        own_session = spark is None
        if own_session:
            spark = build_session(f"absreplay-{job.name}", job.parallelism)
        try:
            if args.recovery:
                report = run_recovery(spark, store, job, settings, request, mode)
            else:
                # a restart after a lost executor reads its plan afresh: from the newest completed checkpoint
                report = restarting_after_lost_executors(job.name, lambda first: EpochRunner(
                    spark, store, job, settings.data_dir, settings.state_uri, mode=mode,
                    max_epochs=args.max_epochs, plan=plan if first else None,
                ).run(), log)
        finally:
            if own_session:
                spark.stop()
    if args.metrics_out:
        with open(args.metrics_out, "w") as fh:
            json.dump(asdict(report), fh, indent=2)
    print(
        f"{job.name}: processed {len(report.epochs)} epoch(s), "
        f"{sum(e.records for e in report.epochs):,} records in {report.total_s:.2f}s; "
        f"{len(report.failed)} snapshot failure(s)",
        flush=True,
    )
    return 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
