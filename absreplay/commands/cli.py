"""`absreplay`: the command line of ABS Replay (its public contract: docs/operations.md, "Command line").

Exit codes: 0 ok, 2 usage or bad input (nothing written; a refused recover or rewind is a REFUSED row), 1 failure.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console

from absreplay.commands import job_listing
from absreplay.commands import plan_view
from absreplay.commands import report
from absreplay.commands import state_commands
from absreplay.commands import views
from absreplay.options import checkpoint_option, count_option
from absreplay.commands.context import JobContext, job_context, open_store_if_migrated
from coordinator.catalog import db as catalog_db
from coordinator.catalog.db import safe_url
from coordinator import modes
from coordinator.checkpoints import weak
from coordinator.upgrades import job_plan
from coordinator.errors import UsageError, as_user_error
from coordinator.dataflow.discovery import discover, jobs_folder
from coordinator.checkpoints.lease import RUN_LEASE_WAIT_S, processing_lease
from coordinator.checkpoints.policy import TriggerDecision
from coordinator.settings import Settings

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_enable=False)
db_app = typer.Typer(no_args_is_help=True, help="The catalog database.")
app.add_typer(db_app, name="db")
# not a terminal (a pipe, a log): wide enough that tables and lines are not folded
out = Console(width=None if sys.stdout.isatty() else 160)

SnapshotModeOption = Annotated[str, typer.Option("--snapshot-mode", help="async (ABS), sync (stop-the-world) or none")]
Parallelism = Annotated[
    int | None,
    count_option("--parallelism", help="subtasks per operator for this run (default: ABS_PARALLELISM, "
                 "else the job's own); state is redistributed by key groups"),
]


#: --json is one JSON document wherever it is offered; --jsonl, one object a line, where rows can be streamed
AsJson = Annotated[bool, typer.Option("--json", help="print one JSON document (an array of the rows)")]
AsJsonLines = Annotated[bool, typer.Option("--jsonl", help="print JSON lines (one object per row)")]


def _print_json(rows: list[dict], as_json: bool, as_jsonl: bool) -> bool:
    """Print ``rows`` as asked (``--json``: one array; ``--jsonl``: a line each); whether either was asked."""
    if as_json and as_jsonl:
        raise UsageError("--json and --jsonl print the same rows two ways: give one of them")
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2, default=str) + "\n")
    elif as_jsonl:
        sys.stdout.writelines(json.dumps(row, default=str) + "\n" for row in rows)
    return as_json or as_jsonl


def _check_mode(mode: str) -> str:
    return modes.parse(modes.SnapshotMode, mode, "--snapshot-mode")


def _parallelism_args(ctx: JobContext, parallelism: int | None) -> list[str]:
    """The application's --parallelism (none asked: the driver reads ABS_PARALLELISM itself); above
    the job's max_parallelism: exit 2 before a JVM starts."""
    from coordinator.checkpoints import rescale

    rescale.run_definition(ctx.store, ctx.job, ctx.settings.parallelism if parallelism is None else parallelism)
    return [] if parallelism is None else ["--parallelism", str(parallelism)]


app.command()(state_commands.state)
app.command()(state_commands.diff)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the catalog schema to the newest revision."""
    settings = Settings.from_env()
    head = catalog_db.upgrade(settings.database_url)
    out.print(f"catalog {safe_url(settings.database_url)} is at revision {head}")


@app.command()
def jobs(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document instead of tables")] = False,
) -> None:
    """The jobs found (installed packages' absreplay.jobs entry points, the files of ABS_JOBS_DIR): where,
    their graph, sinks and catalog state; then the job files that failed to load, with their errors."""
    settings = Settings.from_env()
    jobs_folder()  # set but no directory: exit 2
    store = open_store_if_migrated(settings)  # a malformed or unreachable catalog: exit 2
    found = discover()
    if as_json:
        sys.stdout.write(json.dumps(job_listing.as_json(found, store, settings.database_url), indent=2) + "\n")
        return
    job_listing.print_listing(out, found, store, settings.database_url)


@app.command()
def inject(job: str) -> None:
    """Inject a barrier: record the cut of every source partition (never waits for processing). Its dead
    letters, if any, are counted against its records; beyond the job's max_dead_letter_share: exit 1."""
    ctx = job_context(job)
    outcome = ctx.coordinator.inject()
    if outcome.decision is not TriggerDecision.EXECUTE:
        out.print(f"{job}: barrier skipped ({outcome.decision}); the next barrier covers these records")
        return
    out.print(
        f"{job}: barrier {outcome.checkpoint_id} injected; {outcome.new_segments} new segment(s), "
        f"{outcome.new_records:,} new record(s); cut {views.format_cut(outcome.cut)}"
    )
    dead = ctx.coordinator.dead_letters(outcome.checkpoint_id)
    if dead.count:
        out.print(f"{job}: barrier {outcome.checkpoint_id}: {dead.describe()}", markup=False, highlight=False,
                  soft_wrap=True)
    ctx.coordinator.check_dead_letters(outcome.checkpoint_id, dead)


@app.command()
def process(
    job: str,
    snapshot_mode: SnapshotModeOption = modes.SnapshotMode.ASYNC.value,
    restore_from: Annotated[int | None, checkpoint_option(help="restore from this completed checkpoint")] = None,
    parallelism: Parallelism = None,
) -> None:
    """Process every injected, unprocessed epoch in order, in one Spark application."""
    from absreplay.commands.submit import run_processing

    from coordinator.checkpoints import recovery

    ctx = job_context(job)
    weak.check_run(ctx.job, snapshot_mode, restore_from)
    args = [job, "--snapshot-mode", _check_mode(snapshot_mode), *_parallelism_args(ctx, parallelism)]
    if restore_from is not None:
        recovery.resolve(ctx.store, job, restore_from)  # unknown or not COMPLETED: exit 2 before a JVM starts
        args += ["--restore-from", str(restore_from)]
    elif not _has_pending(ctx):
        return
    _check_unchanged(ctx, restore_from)
    # fail fast, before a JVM starts; the application itself holds the lease for its run
    with processing_lease(ctx.store.engine, job, wait_s=RUN_LEASE_WAIT_S):
        pass
    code = run_processing(ctx.settings, args)
    if code:
        raise typer.Exit(code)


def _has_pending(ctx) -> bool:
    """Nothing to process: say so without starting a JVM."""
    base = weak.resume_point(ctx.store, ctx.job)
    if ctx.store.pending_after(ctx.job.name, base):
        return True
    out.print(f"{ctx.job.name}: no pending epochs after checkpoint {base}")
    return False


def _check_unchanged(ctx: JobContext, checkpoint: int | None) -> None:
    """A job changed since the checkpoint a run would restore (default: the newest completed one): print
    the plan and stop (exit 2) before a JVM starts, instead of failing on state the checkpoint lacks."""
    if checkpoint is None:
        latest = ctx.store.latest_completed(ctx.job.name)
        checkpoint = latest.checkpoint_id if latest else None
    try:
        job_plan.check_unchanged(ctx.store, ctx.job, checkpoint)
    except job_plan.JobChangedError as exc:
        plan_view.print_plan(out, exc.plan)
        raise


@app.command()
def plan(
    job: str,
    as_json: AsJson = False,
) -> None:
    """What changed in the job's declaration since its newest completed checkpoint, operator by operator
    and sink by sink, and what an upgrade does with each. Exit 0 when the next run can go ahead as it is,
    2 when the job needs `absreplay upgrade` (or a choice) first."""
    ctx = job_context(job)
    found = job_plan.plan(ctx.store, ctx.job)
    if as_json:
        sys.stdout.write(json.dumps(plan_view.plan_json(found), indent=2) + "\n")
    else:
        plan_view.print_plan(out, found)
    if found.needs_upgrade:
        raise typer.Exit(2)


@app.command()
def finalize(job: str) -> None:
    """Complete checkpoints: commit sinks, expire timed-out checkpoints, apply retention, collect garbage."""
    ctx = job_context(job)
    report = ctx.coordinator.finalize()
    out.print(views.finalize_line(job, report))


@app.command()
def run(
    job: str,
    cycles: Annotated[int, count_option("--cycles", help="how many inject/process/finalize cycles")] = 1,
    snapshot_mode: SnapshotModeOption = modes.SnapshotMode.ASYNC.value,
    parallelism: Parallelism = None,
) -> None:
    """Inject, process and finalize, N times."""
    ctx = job_context(job)
    _parallelism_args(ctx, parallelism)
    _check_unchanged(ctx, None)  # before the first barrier: nothing written
    _check_mode(snapshot_mode)
    for i in range(1, cycles + 1):
        out.rule(f"cycle {i}/{cycles}")
        inject(job)
        process(job, snapshot_mode=snapshot_mode, restore_from=None, parallelism=parallelism)
        finalize(job)


@app.command()
def checkpoints(
    job: str,
    as_json: AsJson = False,
    as_jsonl: AsJsonLines = False,
    limit: Annotated[int, count_option(help="newest N checkpoints")] = 50,
) -> None:
    """The checkpoint history of a job (the snapshot_history view), with the parallelism of each checkpoint
    and the version of the job's declaration it was taken with (a new version is marked where it starts).
    duration_ms runs from the barrier's injection to completion; state_bytes is what the checkpoint's
    snapshots wrote (a delta holds only the keys that changed)."""
    ctx = job_context(job)
    rows = views.history_rows(ctx.store, job)[-limit:]
    if not _print_json(rows, as_json, as_jsonl):
        views.print_history(out, ctx.store, job, rows)


Fallback = Annotated[
    bool, typer.Option("--fallback", help="if a state file is missing or corrupt, use the previous completed checkpoint")
]
#: set by the recover DAG: the recoveries row (or its refusal) names the Airflow run that asked
AirflowRunId = Annotated[str | None, typer.Option("--airflow-run-id", hidden=True)]


@app.command()
def recover(
    job: str,
    checkpoint: Annotated[int | None, checkpoint_option(help="checkpoint id (default: latest completed)")] = None,
    mode: Annotated[str, typer.Option(help="full (every task) or partial (failed tasks and their upstream)")] = "full",
    fallback: Fallback = False,
    snapshot_mode: SnapshotModeOption = modes.SnapshotMode.ASYNC.value,
    parallelism: Parallelism = None,
    airflow_run_id: AirflowRunId = None,
) -> None:
    """Restore every task from a checkpoint, re-ingest from its cut and resume (the sink dedupes).
    With no completed checkpoint yet, every task starts from the empty state at the start of the sources."""
    modes.parse(modes.RecoveryMode, mode, "--mode")
    _recovery(job, "recover", checkpoint, mode, fallback, _check_mode(snapshot_mode), parallelism, airflow_run_id)


@app.command()
def rewind(
    job: str,
    to: Annotated[int, checkpoint_option("--to", help="checkpoint id: every epoch after it is processed again")],
    fallback: Fallback = False,
    snapshot_mode: SnapshotModeOption = modes.SnapshotMode.ASYNC.value,
    parallelism: Parallelism = None,
    airflow_run_id: AirflowRunId = None,
) -> None:
    """Reprocess every epoch after a checkpoint (e.g. after a bug fix): later checkpoints are
    superseded and the sink's later output is replaced, not duplicated."""
    from coordinator.sinks.declarations import KafkaTopic
    from coordinator.sinks.kafka_topic import APPEND_REWIND

    for sink in job_context(job).job.sinks:
        if isinstance(sink.declaration, KafkaTopic):
            out.print(f"note: sink {sink.name} is a Kafka topic, which a rewind cannot take records back from: "
                      + ("it gets the checkpoint's rows again and tombstones for the keys it should no longer hold"
                         if sink.key else APPEND_REWIND))
    _recovery(job, "rewind", to, "full", fallback, _check_mode(snapshot_mode), parallelism, airflow_run_id)


@app.command()
def upgrade(
    job: str,
    from_start: Annotated[bool, typer.Option("--from-start", help="rebuild from the start of the input (the "
                                             "default when all of it is still there)")] = False,
    from_checkpoint: Annotated[int | None, checkpoint_option(
        "--from-checkpoint", help="rebuild from this completed checkpoint's state and cut")] = None,
    snapshot_mode: SnapshotModeOption = modes.SnapshotMode.ASYNC.value,
    parallelism: Parallelism = None,
    airflow_run_id: AirflowRunId = None,
) -> None:
    """Take a changed job on to its new declaration (see `absreplay plan`): state the new declaration reads is
    carried over, new and changed state is built by replaying the input, new sinks get the backfill, upsert
    sinks with new columns are restated; sinks never get a record twice. Run again after a crash: it resumes."""
    from coordinator.checkpoints import recovery
    from coordinator.upgrades import upgrade as upgrades

    ctx = job_context(job)
    weak.refuse(ctx.job, "upgrade")
    found = job_plan.plan(ctx.store, ctx.job)
    stopped = upgrades.unfinished(ctx.store, job, found.to_version)
    if stopped is not None and (not found.needs_upgrade or job_plan.under_way(
            ctx.store, job, found.to_version, found.checkpoint_id)):
        # an upgrade reset the job and was stopped: its replays are pending epochs, or their commits staged
        out.print(f"{job}: carrying on upgrade #{stopped} to version {found.to_version}")
        if _has_pending(ctx):
            process(job, snapshot_mode=snapshot_mode, restore_from=None, parallelism=parallelism)
        finalize(job)  # the replays' sink commits, as the upgrade's own run makes them
        upgrades.resumed(ctx.store, job, stopped)
        return
    if not found.needs_upgrade:
        out.print(f"{job}: nothing to upgrade: {found.next_step}")
        return
    plan_view.print_plan(out, found)
    with recovery.refusals_recorded(ctx.store, job, "upgrade", "full", from_checkpoint, airflow_run_id):
        start = upgrades.start_point(ctx.store, ctx.job, found, from_start, from_checkpoint)
    _recovery(job, "upgrade", start or None, "full", False, _check_mode(snapshot_mode), parallelism, airflow_run_id)


def _recovery(job: str, kind: str, checkpoint: int | None, mode: str, fallback: bool, snapshot_mode: str,
              parallelism: int | None, airflow_run_id: str | None = None) -> None:
    from absreplay.commands.submit import run_processing
    from coordinator.checkpoints import recovery

    ctx = job_context(job)
    weak.refuse(ctx.job, kind)
    scale = _parallelism_args(ctx, parallelism)
    # a refusal (not a COMPLETED checkpoint, the lease held by a run) is audited with its reason
    with recovery.refusals_recorded(ctx.store, job, kind, mode, checkpoint, airflow_run_id):
        target = recovery.validate(ctx.store, job, recovery.RecoveryKind(kind), recovery.RecoveryMode(mode),
                                   checkpoint)
        if kind != "upgrade":
            job_plan.check_unchanged(ctx.store, ctx.job, target)
        with processing_lease(ctx.store.engine, job, wait_s=RUN_LEASE_WAIT_S):  # fail fast (exit 2) if a run holds it
            pass
    if target is None:
        out.print(f"{job}: {kind} from the start of the sources" + (
            "" if kind == "upgrade" else f" ({mode}): no checkpoint has completed yet"))
    else:
        out.print(f"{job}: {kind} from checkpoint {target} ({mode})")
    args = [job, f"--{kind}", "--mode", mode, "--snapshot-mode", snapshot_mode, *scale]
    args += ["--checkpoint", str(target)] if target is not None else []
    args += ["--airflow-run-id", airflow_run_id] if airflow_run_id else []
    # the row this run left (its result, or the application's own refusal), not an earlier one of the job
    # (or, for the recover DAG, of a previous try of its task)
    earlier = {r["id"] for r in recovery.history(ctx.store, job, airflow_run_id)}
    code = run_processing(ctx.settings, args + (["--fallback"] if fallback else []))
    rows = [r for r in recovery.history(ctx.store, job, airflow_run_id) if r["id"] not in earlier]
    if rows:
        out.print(views.recovery_line(rows[-1]))
    if code:
        raise typer.Exit(code)


@app.command()
def recoveries(
    job: str,
    as_json: AsJson = False,
    as_jsonl: AsJsonLines = False,
) -> None:
    """The recoveries and rewinds of a job (the recoveries table)."""
    from coordinator.checkpoints import recovery

    ctx = job_context(job)
    rows = recovery.history(ctx.store, job)
    if not _print_json(rows, as_json, as_jsonl):
        out.print(views.recoveries_table(job, rows))


@app.command()
def verify(
    job: str,
    checkpoint: Annotated[int | None, checkpoint_option(help="checkpoint id (default: latest completed)")] = None,
) -> None:
    """Recompute a checkpoint's state from the sources alone and compare it with the stored snapshot.
    Exit 0 equal, 1 differs, 2 bad input, 3 could not check (a state file missing or corrupt, a failure)."""
    from absreplay.commands.submit import VERIFY_APP, run_processing

    ctx = job_context(job)
    weak.refuse(ctx.job, "verify")
    if checkpoint is not None:
        ctx.store.checkpoint(job, checkpoint)  # an unknown id: exit 2 before starting Spark
    args = [job] + (["--checkpoint", str(checkpoint)] if checkpoint is not None else [])
    code = run_processing(ctx.settings, args, VERIFY_APP)
    if code:
        raise typer.Exit(code)


@app.command()
def demo(
    batches: Annotated[int, count_option(min=2, help="how many batches of segments land")] = 4,
    lines_per_batch: Annotated[int, count_option()] = 20000,
    airflow: Annotated[bool, typer.Option(help="drive it through the Airflow DAGs (--no-airflow: the CLI alone)")] = True,
) -> None:
    """Run the whole story on embedded defaults and check the result against an independent recount."""
    if airflow:
        from absreplay.commands.airflow_demo import run_airflow_demo as run
    else:
        from absreplay.commands.demo import run_demo as run
    if not run(out, batches, lines_per_batch):
        raise typer.Exit(1)


app.command(name="report")(report.report)  # absreplay/commands/report.py owns it


#: what click raises for a bad option or argument (typer carries its own click, under a private name)
ClickUsageError = typer.BadParameter.__base__


def main(argv: list[str] | None = None) -> None:
    """Entry point: usage errors (a bad option or argument, a number out of range) and ABS Replay's own
    errors are one line (docs/operations.md: exit codes), not click's usage block and framed panel."""
    try:
        code = app(args=argv, prog_name="absreplay", standalone_mode=False)
    except ClickUsageError as exc:
        _usage_error(exc)
    except Exception as exc:
        error = as_user_error(exc)
        if error is None:
            raise  # a bug of ours: its traceback is what a report needs
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(error.exit_code)
    if code:  # typer.Exit(code) of a command, returned rather than raised outside standalone mode
        sys.exit(code)


def _usage_error(exc: Exception) -> None:
    """Exit 2 with one line naming the option and the problem. A command typed without its
    subcommand or arguments shows its help instead, as click does (printed already)."""
    if type(exc).__name__ != "NoArgsIsHelpError":
        message = " ".join(exc.format_message().split())
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        print(f"error: {message}{hint}", file=sys.stderr, flush=True)
    sys.exit(exc.exit_code)
