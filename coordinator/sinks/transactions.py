"""Two-phase SQL sinks: stage a checkpoint's output, commit it when the checkpoint
completes, abort it when it fails.

Pre-commit: the processing run writes a checkpoint's output once, as Parquet
under the checkpoint's directory (the same files serve as the incremental
state snapshot), and records a STAGED transaction: the files' URI and the base
checkpoint (the output is the rows with ``updated`` > base). Commit upserts
those rows into the sink table in one database transaction together with the
status change, so the table only ever shows output as of a committed
checkpoint; transactions commit in checkpoint order. Abort only changes the
status: the files go with the checkpoint's directory. Several transactions of
a sink table in the catalog that one finalize commits (a catch-up) share its
database transaction, so their rows are written as one upsert of each key's
latest row (``write_merged``): the table they leave is the same. Staged rows of
an operator that deletes keys carry its tombstones (``coordinator.sinks.deletes``):
each target deletes their keys in the same commit.

Verification: the ack recorded the staged files' manifest (coordinator.checkpoints.manifests);
a commit reads the files through it, so a missing, truncated or replaced file
commits nothing, leaves the marks alone and names the checkpoint and the file
(``StagedOutputError``). A recovery that replays the checkpoint's epoch anyway
aborts such a transaction instead (``settle(..., replayed_after=N)``).

High-water marks: with its output, a commit records the checkpoint's cut as
the sink's high-water mark per source partition (``sink_watermarks``), in the
same transaction. A transaction whose every record lies at or below those
marks (a replay after a recovery) is DEDUPLICATED: nothing is written twice.
The sinks upsert keyed state values, so a record here is a (key, value) row
and the check is per transaction: a partly new one is written whole, which
rewrites equal values for its old keys.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import delete, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from coordinator.catalog import epochs
from coordinator.catalog.models import Checkpoint, SinkTransaction, SinkWatermark, SourceCut, utcnow
from coordinator.checkpoints import back_edge_logs, manifests, state_files
from coordinator.checkpoints.lifecycle import CheckpointStatus, SinkTxnStatus
from coordinator.dataflow.jobs import JobDefinition, SinkSpec
from coordinator.errors import SinkCommitError
from coordinator.faults import fault_point
from coordinator.sinks.base import SinkTarget
from coordinator.sinks.deletes import DELETE


def read_staged(uri: str, columns: tuple[str, ...], base: int | None) -> pa.Table:
    """The rows of a staged output: the files under ``uri`` with updated > base."""
    if not state_files.exists(uri):
        return pa.table({c: [] for c in columns})
    import pyarrow.dataset as ds  # here: it imports pandas, which the command line's start need not pay for

    fs, path = state_files.filesystem(uri)
    dataset = ds.dataset(path, filesystem=fs, format="parquet", partitioning="hive")
    if "updated" not in dataset.schema.names:  # an epoch that changed no row staged no Parquet file
        return pa.table({c: [] for c in columns})
    flt = None if base is None else pc.field("updated") > base
    marker = [DELETE] if DELETE in dataset.schema.names else []
    return dataset.to_table(columns=[*columns, *marker], filter=flt)


def staged_rows(txn: SinkTransaction, columns: tuple[str, ...], way_on: Callable[[], str]) -> pa.Table:
    """The rows a transaction commits, read from its staged files once they are verified."""
    if txn.checksum is None:  # staged before the catalog recorded manifests (revision 0004)
        return read_staged(txn.staged_uri, columns, txn.base_checkpoint_id)
    files = manifests.verified(txn.staged_uri, txn.checksum, txn.job, txn.checkpoint_id, way_on)
    tables = []
    for _, data in files:
        file = pq.ParquetFile(pa.BufferReader(data))
        # a keyed operator that deletes keys stages its tombstones too (``coordinator.sinks.deletes``)
        marker = [DELETE] if DELETE in file.schema_arrow.names else []
        tables.append(file.read(columns=[*columns, *marker, "updated"]))
    if not tables:
        return pa.table({c: [] for c in columns})
    rows = pa.concat_tables(tables, promote_options="default")
    if txn.base_checkpoint_id is not None:
        rows = rows.filter(pc.greater(rows.column("updated"), txn.base_checkpoint_id))
    return rows.select([*columns, *([DELETE] if DELETE in rows.column_names else [])])


def stage(s: Session, job: str, sink_name: str, checkpoint_id: int, uri: str, base: int | None, rows: int,
          manifest: manifests.Manifest | None = None) -> None:
    """Pre-commit: record the checkpoint's staged output (replacing a dead attempt's record), with
    the manifest of its files (``manifests.seal``) that the commit verifies."""
    txn = s.get(SinkTransaction, (job, checkpoint_id, sink_name))
    if txn is None:
        txn = SinkTransaction(job=job, checkpoint_id=checkpoint_id, sink=sink_name)
        s.add(txn)
    txn.status, txn.staged_uri, txn.base_checkpoint_id = SinkTxnStatus.STAGED, uri, base
    txn.rows, txn.staged_at, txn.finished_at = rows, utcnow(), None
    txn.files, txn.bytes, txn.checksum = (
        (manifest.files, manifest.bytes, manifest.checksum) if manifest else (None, None, None))


def cut_of(s: Session, job: str, checkpoint_id: int) -> dict[str, int]:
    return dict(s.execute(
        select(SourceCut.partition, SourceCut.offset).where(SourceCut.job == job, SourceCut.checkpoint_id == checkpoint_id)
    ).all())


def watermarks(s: Session, job: str, sink_name: str) -> dict[str, int]:
    return dict(s.execute(
        select(SinkWatermark.partition, SinkWatermark.offset).where(SinkWatermark.job == job, SinkWatermark.sink == sink_name)
    ).all())


def set_watermarks(s: Session, job: str, sink_name: str, cut: dict[str, int], checkpoint_id: int) -> None:
    s.execute(delete(SinkWatermark).where(SinkWatermark.job == job, SinkWatermark.sink == sink_name))
    s.add_all(SinkWatermark(job=job, sink=sink_name, partition=p, offset=o, checkpoint_id=checkpoint_id)
              for p, o in sorted(cut.items()))


def covered(cut: dict[str, int], marks: dict[str, int]) -> bool:
    """Every record before ``cut`` is at or below the high-water marks (already in the sink)."""
    return bool(marks) and all(offset <= marks.get(p, 0) for p, offset in cut.items())


def target_of(s: Session, sink: SinkSpec) -> SinkTarget:
    return sink.target(s.get_bind().url.render_as_string(hide_password=False))


def write(s: Session, sink: SinkSpec, job: str, checkpoint_id: int, rows: pa.Table,
          target: SinkTarget | None = None) -> bool:
    """Apply one checkpoint's rows to the sink's target; False: the target had them already."""
    target = target or target_of(s, sink)
    if getattr(target, "in_catalog", False):
        # rows, commit record, status and marks: one transaction of the catalog
        return target.commit_in(s, job, sink.name, checkpoint_id, rows)
    # the target's own commit record makes this idempotent if the catalog's change after it is lost
    target.prepare()  # made from the declared columns when missing; another schema is refused by name
    return target.commit(job, sink.name, checkpoint_id, rows)


def commit(s: Session, sink: SinkSpec, txn: SinkTransaction, way_on: Callable[[], str] = str,
           deferred: dict[str, list[tuple[int, pa.Table]]] | None = None) -> None:
    """Commit one staged transaction in the caller's catalog transaction. ``deferred`` (``settle``): a
    sink table in the catalog gets its rows later, merged with the next transactions' (``write_merged``):
    the same database transaction, so the same table when it commits, written once."""
    # a job with a loop also reads its back-edge log: an epoch with no new source record is not a replay
    cut = cut_of(s, txn.job, txn.checkpoint_id) | back_edge_logs.loop_position(s, txn.job, txn.checkpoint_id)
    marks = watermarks(s, txn.job, txn.sink)
    if covered(cut, marks):
        txn.status, txn.rows, txn.finished_at = SinkTxnStatus.DEDUPLICATED, 0, utcnow()
        return
    rows = staged_rows(txn, sink.column_names, way_on)
    target = target_of(s, sink)
    if deferred is not None and getattr(target, "in_catalog", False) and getattr(target, "merges_commits", False):
        deferred.setdefault(sink.name, []).append((txn.checkpoint_id, rows))
    else:
        write(s, sink, txn.job, txn.checkpoint_id, rows, target)
    fault_point("sink.mid_commit", txn.checkpoint_id)
    set_watermarks(s, txn.job, txn.sink, {p: max(o, marks.get(p, 0)) for p, o in cut.items()}, txn.checkpoint_id)
    txn.status, txn.rows, txn.finished_at = SinkTxnStatus.COMMITTED, rows.num_rows, utcnow()


def write_merged(s: Session, sink: SinkSpec, job: str, batches: list[tuple[int, pa.Table]]) -> None:
    """Several checkpoints' rows for a sink table in the catalog (in checkpoint order), written as
    one: per key the row of the latest checkpoint, stamped with that checkpoint (an append sink:
    every row, each with its own). What committing them one after the other leaves in the table,
    at the cost of one upsert, not one per checkpoint (a catch-up of n epochs that each touch most
    keys wrote every key n times). Checkpoints the table's commit record already holds are skipped. A key
whose latest row is a tombstone (``coordinator.sinks.deletes``) is deleted."""
    target = target_of(s, sink)
    done = target.committed_in(s, job, sink.name)
    batches = [(cid, rows) for cid, rows in batches if done is None or cid > done]
    if not batches:
        return
    rows = pa.concat_tables([rows.append_column("checkpoint_id", pa.repeat(pa.scalar(cid, pa.int64()), rows.num_rows))
                             for cid, rows in batches], promote_options="default")
    if target.key is not None and rows.num_rows:  # each key's last row: the latest checkpoint's
        positions = rows.select(list(target.key)).append_column("_position", pa.array(np.arange(rows.num_rows)))
        rows = rows.take(positions.group_by(list(target.key)).aggregate([("_position", "max")])
                         .column("_position_max"))
    target.commit_in(s, job, sink.name, batches[-1][0], rows)


def revert_after(s: Session, job: str, sink: SinkSpec, checkpoint_id: int, cut: dict[str, int],
                 state_rows: pa.Table | None) -> int:
    """Put the sink back to exactly checkpoint ``checkpoint_id`` (for a rewind): its view of that
    checkpoint's state (``state_rows``: sink columns and ``updated``), whatever checkpoint stamped
    the rows there now (after an earlier recovery, rows of superseded checkpoints carry lower ids
    than the rewind target). An append sink loses the rows of the checkpoints whose epoch comes
    after the target's (``epochs.later_epochs``), not those of higher ids: a deduplicated replay
    leaves its epoch's rows under the superseded checkpoint's lower id. The high-water marks go
    back to the checkpoint's cut. Returns the rows touched."""
    rows = state_rows if state_rows is not None else pa.table(
        {c: pa.array([], type=t) for c, t in zip(sink.column_names, sink.arrow_schema.types, strict=True)}
        | {"updated": pa.array([], type=pa.int64())})
    later = epochs.later_epochs(epochs.epochs(s, job), checkpoint_id)
    target = target_of(s, sink)
    if getattr(target, "in_catalog", False):
        touched = target.revert_in(s, job, sink.name, checkpoint_id, rows, later)
    else:
        target.prepare()
        touched = target.revert(job, sink.name, checkpoint_id, rows, later)
    set_watermarks(s, job, sink.name, cut, checkpoint_id)
    return touched


def restate_after(s: Session, job: str, sink: SinkSpec, checkpoint_id: int, cut: dict[str, int]) -> None:
    """Let the replays after ``checkpoint_id`` write the sink again (an upgrade that gives an upsert sink new
    columns): its high-water marks go back to the checkpoint's cut, so their commits are not deduplicated,
    and its table gains the declared columns. Its rows stay: each replayed key's row is replaced."""
    target = target_of(s, sink)
    if getattr(target, "in_catalog", False):
        target.evolve_in(s)
    elif hasattr(target, "evolve_in"):  # a table in another database: its own transaction, before the marks
        with target.engine.begin() as conn:
            target.evolve_in(conn)
    set_watermarks(s, job, sink.name, cut, checkpoint_id)


def abort(txn: SinkTransaction) -> None:
    txn.status, txn.finished_at = SinkTxnStatus.ABORTED, utcnow()


def way_past(s: Session, job: str, checkpoint_id: int) -> str:
    """How to get past a checkpoint whose staged output cannot be committed: replay its epoch."""
    before = s.scalar(select(Checkpoint.checkpoint_id).where(
        Checkpoint.job == job, Checkpoint.checkpoint_id < checkpoint_id,
        Checkpoint.status == CheckpointStatus.COMPLETED,
    ).order_by(Checkpoint.checkpoint_id.desc()).limit(1))
    where = f"--checkpoint {before}" if before is not None else "--fallback"
    return f"replay its epoch from an earlier checkpoint with `absreplay recover {job} {where}`"


def settle(s: Session, job_definition: JobDefinition, replayed_after: int | None = None,
           commit_replayed: bool = True) -> tuple[list[int], list[int]]:
    """Commit the staged transactions of completed checkpoints (in order) and abort the failed ones'.

    Returns (committed ids, aborted ids). A staged transaction of a still
    PENDING checkpoint stops the commits: later ones must wait for it.
    ``replayed_after``: a recovery is about to replay every epoch after this checkpoint, so a
    transaction after it whose files fail verification is aborted (its epoch is redone), not raised.
    ``commit_replayed`` False (an upgrade): every transaction after ``replayed_after`` is aborted, since its
    rows have the old version's columns and its epoch is redone with the new one. A sink no longer declared
    keeps its staged transactions: nothing commits them.
    """
    job = job_definition.name
    specs = {sink.name: sink for sink in job_definition.sinks}
    rows = s.execute(
        select(SinkTransaction, Checkpoint.status)
        .join(
            Checkpoint,
            (Checkpoint.job == SinkTransaction.job) & (Checkpoint.checkpoint_id == SinkTransaction.checkpoint_id),
        )
        .where(SinkTransaction.job == job, SinkTransaction.status == SinkTxnStatus.STAGED)
        .order_by(SinkTransaction.checkpoint_id)
    ).all()
    committed, aborted = [], []
    blocked = False
    deferred: dict[str, list[tuple[int, pa.Table]]] = {}
    for txn, status in rows:
        if txn.sink not in specs:
            continue
        if status == CheckpointStatus.FAILED or (
                not commit_replayed and replayed_after is not None and txn.checkpoint_id > replayed_after):
            abort(txn)
            aborted.append(txn.checkpoint_id)
        elif status == CheckpointStatus.PENDING:
            blocked = True
        elif not blocked:
            try:
                # verification comes before any write: a failed one leaves the transaction untouched
                commit(s, specs[txn.sink], txn, lambda cid=txn.checkpoint_id: way_past(s, job, cid), deferred)
            except manifests.StagedOutputError:
                if replayed_after is None or txn.checkpoint_id <= replayed_after:
                    raise
                abort(txn)
                aborted.append(txn.checkpoint_id)
                continue
            except (SQLAlchemyError, pa.ArrowException, OSError) as exc:
                # the database, the staged files: one line that names the checkpoint and the way on
                raise SinkCommitError(job, txn.checkpoint_id, target_of(s, specs[txn.sink]).describe(), exc) from exc
            committed.append(txn.checkpoint_id)
    for name, batches in deferred.items():
        try:
            write_merged(s, specs[name], job, batches)
        except (SQLAlchemyError, pa.ArrowException, OSError) as exc:
            raise SinkCommitError(job, batches[-1][0], target_of(s, specs[name]).describe(), exc) from exc
    return committed, aborted
