"""Recovery and rewind, inside the processing application (under the job's lease).

    1. record the recovery (RUNNING);
    2. restore every task's state from checkpoint N (no checkpoint completed yet: the empty
       state at the start of the sources) and check every file (nothing is
       changed yet: a missing or corrupt file stops here, or with --fallback moves to
       the previous completed checkpoint), and every segment the replay reads (a changed
       one refuses the recovery);
    3. settle the sinks and reset the checkpoints after N (coordinator.checkpoints.recovery);
    4. resume: process every pending epoch from N's cut (replays first), then finalize;
    5. record how it ended.
"""

from __future__ import annotations

import time

from pyspark.sql import SparkSession

from coordinator.checkpoints import recovery, rescale, run_plan
from coordinator.upgrades import job_plan, upgrade
from coordinator.checkpoints.coordinator import CheckpointCoordinator
from coordinator.checkpoints.recovery import RecoveryResult
from coordinator.modes import RecoveryKind, RecoveryMode, RecoveryRequest
from coordinator.checkpoints.store import CheckpointStore
from coordinator.dataflow.jobs import JobDefinition
from coordinator.errors import SourceError, StateIntegrityError
from coordinator.faults import fault_point
from coordinator.settings import Settings
from spark_jobs.operators import keyed_operators, refire
from spark_jobs.run.runner import EpochRunner, Restored, RunReport, log
from coordinator.modes import SnapshotMode
from coordinator.dataflow.graph import OperatorKind


def restated_rows(job: JobDefinition, restored: Restored, settings: Settings) -> dict:
    """Each sink of a re-firing window or a re-emitting join as of the restored checkpoint
    (``spark_jobs.operators.refire``, ``keyed_operators.rejoined``)."""
    rows = {}
    for sink in job.sinks:
        node = job.spec.node(sink.input) if job.spec is not None else None
        if sink.from_state or sink.key is None or node is None:
            continue
        if node.kind is OperatorKind.JOIN:  # a re-emitting join: every record and its key's row are in its state
            rows[sink.name] = keyed_operators.rejoined(restored.states[sink.input], node,
                                                       sink.column_names).toArrow()
            continue
        target = sink.target(settings.database_url)
        target.prepare()
        rows[sink.name] = refire.rewound(node, sink.column_names, restored.states[sink.input],
                                         restored.watermarks.get(sink.input), restored.checkpoint_id, target.read())
    return rows


def run_recovery(spark: SparkSession, store: CheckpointStore, job: JobDefinition, settings: Settings,
                 request: RecoveryRequest, snapshot_mode: SnapshotMode) -> RunReport:
    recovery_id = recovery.start(store, job.name, request.kind, request.mode, request.checkpoint,
                                 request.airflow_run_id)
    start = f"checkpoint {request.checkpoint}" if request.checkpoint else \
        "the start of the input" if request.kind is RecoveryKind.UPGRADE else "the latest checkpoint"
    log(f"{job.name}: {request.kind} #{recovery_id} ({request.mode}) from {start}")
    plan = None
    try:
        target = recovery.validate(store, job.name, request.kind, request.mode, request.checkpoint)
        if request.kind is RecoveryKind.UPGRADE:  # checked again under the lease: what it is compared with
            plan = job_plan.plan(store, job)
            target = upgrade.start_point(store, job, plan, not request.checkpoint, request.checkpoint) or None
    except BaseException as exc:
        # checked last under the lease (a finalize may have subsumed the checkpoint meanwhile): nothing changed yet
        refused = recovery.is_refusal(exc)
        recovery.finish(store, recovery_id, RecoveryResult.REFUSED if refused else RecoveryResult.FAILED,
                        detail=str(exc) if refused else failure_detail(exc))
        raise
    refused = False
    try:
        fault_point("recovery.restore", target)
        runner = EpochRunner(spark, store, job, settings.data_dir, settings.state_uri, mode=snapshot_mode,
                             restore_from=target)
        t0 = time.perf_counter()
        restored, notes = restore_checked(runner, store, job, target, request)
        restore_s = time.perf_counter() - t0
        target = restored.checkpoint_id
        if target is None:
            notes.append(f"upgrade from version {plan.from_version} to {plan.to_version}: every operator's state is "
                         f"built from the start of the sources" if plan else
                         "no checkpoint has completed yet: every task starts from the empty state "
                         "at the start of the sources")
            log("  " + notes[-1])
        try:
            # what the replay will read, before the reset changes anything: a segment changed since it was
            # read refuses the recovery, rather than failing it half done
            runner.check_segments(run_plan.replayed(store, job, target))
        except SourceError as exc:
            refused = True
            if plan is not None:
                raise SourceError(f"{exc}; an upgrade replays the input from {f'checkpoint {target}' if target else 'the start'}: "
                                  f"upgrade --from-checkpoint N from a checkpoint whose later input is still "
                                  f"there") from exc
            raise
        resets = upgrade.sink_resets(job, plan) if plan is not None else {}
        state_rows = None
        reverted = {sink.name for sink in job.sinks} if request.kind is RecoveryKind.REWIND else \
            {name for name, how in resets.items() if how == "revert"}
        if reverted and target is not None:
            # each upsert sink's view of checkpoint N, to put rows written after N back to it
            state_rows = {sink.name: restored.states[sink.input].select(*sink.column_names, "updated").toArrow()
                          for sink in job.sinks if sink.from_state and sink.name in reverted}
            state_rows |= {name: rows for name, rows in restated_rows(job, restored, settings).items()
                           if name in reverted}
        reset = recovery.reset_after(store, job, target, recovery_id, request.kind, state_rows, resets,
                                     upgrade.row(plan, recovery_id, target or 0, request.airflow_run_id)
                                     if plan is not None else None)
        notes.append(
            f"restored checkpoint {target or 'none'}; superseded {reset.superseded or 'none'}; "
            f"replays {sorted(reset.replays) or 'none'}; sink: committed {reset.committed or 'none'}, "
            f"aborted {reset.aborted or 'none'}, reverted rows {reset.reverted_rows}"
        )
        log("  " + notes[-1])
        if restored.back_edge is not None:
            notes.append(f"replayed back-edge log {target}: {restored.back_edge_records:,} records first")
        fault_point("recovery.after_reset", target)
        report = runner.run(restored)  # its plan: the epochs after the restored checkpoint, read after the reset
        report.restore_s = restore_s  # read and verified above, before anything changed
        final = CheckpointCoordinator(store, job, settings.data_dir, settings.state_uri).finalize()
        notes.append(f"resumed: {len(report.epochs)} epoch(s); committed {final.committed or 'none'}")
        log("  " + notes[-1])
    except BaseException as exc:
        recovery.finish(store, recovery_id, RecoveryResult.REFUSED if refused else RecoveryResult.FAILED,
                        detail=str(exc) if refused else failure_detail(exc))
        raise
    recovery.finish(store, recovery_id, RecoveryResult.SUCCEEDED, restored=target, detail="; ".join(notes),
                    back_edge_records=restored.back_edge_records)
    return report


def failure_detail(exc: BaseException) -> str:
    """A failed recovery's detail: the error's class and first line."""
    return f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def restore_checked(runner: EpochRunner, store: CheckpointStore, job: JobDefinition, target: int | None,
                    request: RecoveryRequest) -> tuple[Restored, list[str]]:
    """Restore ``target`` with every file checked; with --fallback, step back to older completed
    checkpoints while files are missing or corrupt, and say so."""
    notes: list[str] = []
    partial = request.mode is RecoveryMode.PARTIAL
    if partial and target is None:
        notes.append("partial: no completed checkpoint to keep state from: every task restarts")
        log("  " + notes[-1])
        partial = False
    if partial and runner.flow.is_iterative:
        notes.append("partial: the job has a loop, every task is upstream of every other: all of them restart")
        log("  " + notes[-1])
        partial = False
    if partial:
        rescaled = _rescaled(store, job, target)
        if rescaled:
            notes.append(f"partial: {rescaled}: the state is split anew by key groups, so every task restarts")
            log("  " + notes[-1])
            partial = False
    while True:
        heads = {}
        if partial:
            operators = [op.name for op in job.graph.operators]
            heads = recovery.partial_heads(store, job.name, operators, job.parallelism, target)
            kept = {i: c for i, c in heads.items() if c > target}
            notes.append(f"partial: subtasks {sorted(kept) or 'none'} keep their state "
                         f"({', '.join(f'#{i} at {c}' for i, c in sorted(kept.items())) or 'no acks to keep'})")
            log("  " + notes[-1])
        try:
            return runner.restore(target, heads), notes
        except StateIntegrityError as exc:
            if not request.fallback:
                raise
            older = recovery.previous_completed(store, job.name, target)
            to = f"checkpoint {older}" if older is not None else "the start of the sources (no older completed checkpoint)"
            notes.append(f"checkpoint {target} is unusable ({exc}); --fallback: recovering from {to}")
            log("  " + notes[-1])
            # kept acks belong to checkpoints after the unusable one: fall back to a full recovery
            target, partial = older, False


def _rescaled(store: CheckpointStore, job: JobDefinition, target: int) -> str:
    """Why a partial recovery of ``target`` at the run's parallelism cannot keep any task's state
    (its subtasks hold other keys than at the checkpoint, or than in the failed attempt); empty if it can."""
    taken_at = rescale.taken_at(store, job.name, target, job.state_operator)
    if taken_at != job.parallelism:
        return f"checkpoint {target} was taken at parallelism {taken_at}, this run is at {job.parallelism}"
    other = rescale.pending_at_other_parallelism(store, job.name, target, job.parallelism)
    if other:
        return f"pending checkpoint(s) {other} were taken at another parallelism than this run's {job.parallelism}"
    return ""
