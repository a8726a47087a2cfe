"""What the recover DAG's tasks do: check a request against the catalog (refusals recorded), then run it
through the command line (``absreplay recover|rewind|upgrade``) in its own process group.

Like ``orchestration``, nothing here imports Airflow, pyspark or pyarrow at module level.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from absreplay.airflow.orchestration import catalog_store, sink_commit_marks, sink_commits_after
from absreplay.commands.process_group import stop_process_group
from coordinator import modes
from coordinator.arguments import BIGINT_MAX
from coordinator.checkpoints.lifecycle import CheckpointStatus
from coordinator.dataflow.discovery import get_job
from coordinator.errors import AbsError, CheckpointNotFoundError, UsageError
from coordinator.modes import RecoveryKind, RecoveryMode, RecoveryRequest
from coordinator.settings import Settings

if TYPE_CHECKING:
    from coordinator.dataflow.jobs import JobDefinition

#: a recovery command that runs longer is stopped with its whole process group
RECOVERY_TIMEOUT_S = 6 * 3600


def command_args(params: Mapping[str, Any]) -> list[str]:
    """The ``absreplay`` command line of a validated request (``RecoveryRequest.as_params``)."""
    request = RecoveryRequest.from_params(params)
    if request.kind is RecoveryKind.UPGRADE:
        start = ["--from-checkpoint", str(request.checkpoint)] if request.checkpoint else ["--from-start"]
        args = ["upgrade", request.job, *start]
    elif request.kind is RecoveryKind.REWIND:
        args = ["rewind", request.job, "--to", str(request.checkpoint)]
    else:
        checkpoint = ["--checkpoint", str(request.checkpoint)] if request.checkpoint is not None else []
        args = ["recover", request.job, *checkpoint, "--mode", str(request.mode)]
    run = ["--airflow-run-id", request.airflow_run_id] if request.airflow_run_id else []
    return args + (["--fallback"] if request.fallback else []) + run


class RecoveryCommandError(AbsError):
    """The command line's recovery entry exited non-zero; carries its exit code and message."""

    def __init__(self, args: list[str], exit_code: int, message: str) -> None:
        super().__init__(f"`absreplay {' '.join(args)}` exited {exit_code}: {message}")
        self.exit_code = exit_code


def validate_recovery(
    settings: Settings, job: str, checkpoint: Any, mode: Any, rewind: Any, fallback: Any = False,
    airflow_run_id: str | None = None, upgrade: Any = False,
) -> dict[str, Any]:
    """Check a recovery request against the catalog and pin the checkpoint it restores; a refusal is
    recorded in ``recoveries`` with its reason (REFUSED) and raised. With ``upgrade``, the request takes the
    changed job on to its declaration (``absreplay upgrade``), rebuilding from ``checkpoint`` (empty: the start)."""
    from coordinator.checkpoints import recovery

    definition = get_job(job)
    try:
        if upgrade is not False:
            return _validated_upgrade(settings, definition, checkpoint, mode, rewind, fallback, upgrade,
                                      airflow_run_id)
        return _validated(settings, job, checkpoint, mode, rewind, fallback, airflow_run_id)
    except AbsError as exc:
        if recovery.is_refusal(exc):
            with catalog_store(settings) as store:
                requested = checkpoint if is_checkpoint_id(checkpoint) else None
                kind = "upgrade" if upgrade is True else "rewind" if rewind is True else "recover"
                recovery.refuse(store, job, kind, str(mode), requested, str(exc), airflow_run_id)
        raise


def _validated_upgrade(settings: Settings, job: JobDefinition, checkpoint: Any, mode: Any, rewind: Any,
                       fallback: Any, upgrade: Any, airflow_run_id: str | None) -> dict[str, Any]:
    """What ``absreplay upgrade`` itself refuses (``upgrade.start_point``), checked before its run starts; a
    changed job whose upgrade was stopped after its reset passes: the command carries it on."""
    from coordinator.upgrades import job_plan
    from coordinator.upgrades import upgrade as upgrades

    if upgrade is not True:
        raise UsageError(f"upgrade must be true or false, not {upgrade!r}")
    if rewind is not False or fallback is not False or mode != "full":
        raise UsageError("upgrade replays every task from where it rebuilds: leave rewind and fallback off and "
                         "mode 'full'")
    if checkpoint is not None and not is_checkpoint_id(checkpoint):
        raise UsageError(f"checkpoint must be a whole number from 1 to {BIGINT_MAX}, or empty to rebuild from the "
                         f"start of the input; got {checkpoint!r}")
    with catalog_store(settings) as store:
        found = job_plan.plan(store, job)
        if found.needs_upgrade and not job_plan.under_way(store, job.name, found.to_version, found.checkpoint_id):
            upgrades.start_point(store, job, found, checkpoint is None, checkpoint)
    return RecoveryRequest(RecoveryKind.UPGRADE, RecoveryMode.FULL, checkpoint, False, airflow_run_id,
                           job.name).as_params()


def is_checkpoint_id(value: Any) -> bool:
    """Whether ``value`` fits the catalog's checkpoint ids (a larger one is an overflow of the database's
    driver, not an unknown id)."""
    return type(value) is int and 1 <= value <= BIGINT_MAX


def _validated(settings: Settings, job: str, checkpoint: Any, mode: Any, rewind: Any, fallback: Any,
               airflow_run_id: str | None) -> dict[str, Any]:
    mode = modes.parse(RecoveryMode, mode, "mode")
    if not isinstance(rewind, bool):
        raise UsageError(f"rewind must be true or false, not {rewind!r}")
    if not isinstance(fallback, bool):
        raise UsageError(f"fallback must be true or false, not {fallback!r}")
    if rewind and mode is not RecoveryMode.FULL:
        raise UsageError("rewind reprocesses every task from the checkpoint: use mode 'full' with rewind")
    kind = RecoveryKind.REWIND if rewind else RecoveryKind.RECOVER
    if checkpoint is not None and not is_checkpoint_id(checkpoint):
        raise UsageError(f"checkpoint must be a whole number from 1 to {BIGINT_MAX}, or empty for the latest "
                         f"completed one; got {checkpoint!r}")
    with catalog_store(settings) as store:
        if checkpoint is None:
            latest = store.latest_completed(job)
            if latest is None:
                if rewind:
                    raise UsageError(f"job {job!r} has no completed checkpoint to rewind to yet")
                # nothing completed yet: the recovery starts every task from the start of the sources
                return RecoveryRequest(RecoveryKind.RECOVER, mode, None, fallback, airflow_run_id, job).as_params()
            checkpoint = latest.checkpoint_id
        ck = store.checkpoint(job, checkpoint)  # CheckpointNotFoundError: unknown id
    status = CheckpointStatus(ck.status)
    if status is CheckpointStatus.FAILED:
        reason = ck.failure_reason or "no reason recorded"
        raise CheckpointNotFoundError(
            job, checkpoint, f"is FAILED ({reason}): only a COMPLETED checkpoint can be restored"
        )
    if status is CheckpointStatus.SUBSUMED:
        raise CheckpointNotFoundError(
            job, checkpoint, "is SUBSUMED: a newer checkpoint replaced it and its state files were garbage-collected"
        )
    if status is CheckpointStatus.PENDING:
        raise CheckpointNotFoundError(job, checkpoint, "is still PENDING: not every task has acknowledged it")
    if status is CheckpointStatus.SUPERSEDED:
        raise CheckpointNotFoundError(
            job, checkpoint, "is SUPERSEDED: a recovery or rewind replaced it (see the recoveries table)"
        )
    from coordinator.checkpoints import recovery

    with catalog_store(settings) as store:  # what the command line itself checks (e.g. partial needs the latest)
        recovery.validate(store, job, kind, mode, checkpoint)
    return RecoveryRequest(kind, mode, checkpoint, fallback, airflow_run_id, job).as_params()


def absreplay_executable() -> str:
    from absreplay.commands.submit import executable

    return executable("absreplay")


def run_recovery(settings: Settings, request: Mapping[str, Any]) -> str:
    """Run the command line's recovery entry for a validated request; its output, or RecoveryCommandError."""
    args = command_args(request)
    # COLUMNS: the command line's console would wrap its one-line error at 80 columns
    env = {**os.environ, **settings.as_env(), "COLUMNS": "1000"}
    # its own process group: spark-submit and the driver JVM are its children, and they hold the job's lease
    proc = subprocess.Popen([absreplay_executable(), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=RECOVERY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop_process_group(proc)
        raise RecoveryCommandError(
            args, -signal.SIGKILL, f"did not finish in {RECOVERY_TIMEOUT_S} s; its whole process group was stopped"
        ) from None
    except BaseException:  # the task itself is being stopped (Airflow's SIGTERM): so is the recovery
        stop_process_group(proc)
        raise
    print(f"$ absreplay {' '.join(args)}\n{stdout}", flush=True)
    if proc.returncode:
        print(stderr, file=sys.stderr, flush=True)  # the JVM's and Spark's lines too: the message is one line
        raise RecoveryCommandError(args, proc.returncode, command_error(stderr, stdout))
    return stdout


def command_error(stderr: str, stdout: str) -> str:
    """The one-line message of the command line (its ``error: `` line on stderr) or of the application it
    spark-submitted (on stdout: Spark hands the driver's stderr to its own stdout), never the JVM's warnings;
    without one (a bug), the exception of the last traceback, else the last line on stderr."""
    for output in (stderr, stdout):
        errors = [line.removeprefix("error: ").strip() for line in output.splitlines() if line.startswith("error: ")]
        if errors:
            return errors[-1]
    for output in (stderr, stdout):
        lines = output.splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
        # the frames are indented; the first line after them that is not names the exception
        raised = [line for line in lines[starts[-1] + 1:] if line and not line[0].isspace()] if starts else []
        if raised:
            return raised[0]
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"no message; stdout: {stdout[-500:]}"


def run_recovery_publishing(settings: Settings, request: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """``run_recovery``, and what it committed to each sink (the recovery runs in its own process)."""
    job = request["job"]
    marks = sink_commit_marks(settings, job)
    output = run_recovery(settings, request)
    return output, sink_commits_after(settings, job, marks)

