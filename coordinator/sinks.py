"""Two-phase SQL sinks: stage a checkpoint's output, commit it when the checkpoint
completes, abort it when it fails.

Pre-commit: the processing run writes a checkpoint's output once, as Parquet
under the checkpoint's directory (the same files serve as the incremental
state snapshot), and records a STAGED transaction: the files' URI and the base
checkpoint (the output is the rows with ``updated`` > base). Commit upserts
those rows into the sink table in one database transaction together with the
status change, so the table only ever shows output as of a committed
checkpoint; transactions commit in checkpoint order. Abort only changes the
status: the files go with the checkpoint's directory.

High-water marks: with its output, a commit records the checkpoint's cut as
the sink's high-water mark per source partition (``sink_watermarks``), in the
same transaction. A transaction whose every record lies at or below those
marks (a replay after a recovery) is DEDUPLICATED: nothing is written twice.
The sinks upsert keyed state values, so a record here is a (key, value) row
and the check is per transaction: a partly new one is written whole, which
rewrites equal values for its old keys.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from sqlalchemy import delete, select, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from coordinator import back_edge_logs, state_files
from coordinator.catalog.models import Checkpoint, SinkTransaction, SinkWatermark, SourceCut, utcnow
from coordinator.errors import SinkCommitError
from coordinator.faults import fault_point
from coordinator.lifecycle import CheckpointStatus, SinkTxnStatus


@dataclass(frozen=True)
class SinkTable:
    table: str
    key: str
    values: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.key, *self.values)


SINK_TABLES: dict[str, SinkTable] = {
    "wordcount_counts": SinkTable("wordcount_counts", "word", ("count",)),
    "cc_labels": SinkTable("cc_labels", "vertex", ("component",)),
}


def read_staged(uri: str, columns: tuple[str, ...], base: int | None) -> pa.Table:
    """The rows of a staged output: the files under ``uri`` with updated > base."""
    if not state_files.exists(uri):
        return pa.table({c: [] for c in columns})
    fs, path = state_files.filesystem(uri)
    dataset = ds.dataset(path, filesystem=fs, format="parquet", partitioning="hive")
    if "updated" not in dataset.schema.names:  # an epoch that changed no row staged no Parquet file
        return pa.table({c: [] for c in columns})
    flt = None if base is None else pc.field("updated") > base
    return dataset.to_table(columns=list(columns), filter=flt)


def upsert(s: Session, sink: SinkTable, checkpoint_id: int, rows: pa.Table) -> None:
    """Insert or replace rows (key, values...) of the sink table, stamped with the checkpoint
    (or with each row's own ``checkpoint_id`` column when ``rows`` has one)."""
    if rows.num_rows == 0:
        return
    cols = (*sink.columns, "checkpoint_id")
    if "checkpoint_id" in rows.column_names:
        data = [rows.column(c).to_pylist() for c in cols]
    else:
        data = [rows.column(c).to_pylist() for c in sink.columns] + [[checkpoint_id] * rows.num_rows]
    conn = s.connection()
    raw = conn.connection.dbapi_connection
    updates = ", ".join(f"{c} = excluded.{c}" for c in (*sink.values, "checkpoint_id"))
    conflict = f"ON CONFLICT ({sink.key}) DO UPDATE SET {updates}"
    if conn.dialect.name == "postgresql":
        # COPY into a temporary table, then one set-based upsert: far faster than row inserts
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(zip(*data))
        buf.seek(0)
        with raw.cursor() as cur:
            cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS _abs_upsert (LIKE {sink.table}) ON COMMIT DROP")
            cur.copy_expert(f"COPY _abs_upsert ({', '.join(cols)}) FROM STDIN WITH (FORMAT csv)", buf)
            cur.execute(
                f"INSERT INTO {sink.table} ({', '.join(cols)}) SELECT {', '.join(cols)} FROM _abs_upsert {conflict}"
            )
            cur.execute("DROP TABLE _abs_upsert")
    else:
        marks = ", ".join("?" for _ in cols)
        cur = raw.cursor()
        cur.executemany(
            f"INSERT INTO {sink.table} ({', '.join(cols)}) VALUES ({marks}) {conflict}",
            zip(*data),
        )
        cur.close()


def stage(s: Session, job: str, sink_name: str, checkpoint_id: int, uri: str, base: int | None, rows: int) -> None:
    """Pre-commit: record the checkpoint's staged output (replacing a dead attempt's record)."""
    txn = s.get(SinkTransaction, (job, checkpoint_id, sink_name))
    if txn is None:
        txn = SinkTransaction(job=job, checkpoint_id=checkpoint_id, sink=sink_name)
        s.add(txn)
    txn.status, txn.staged_uri, txn.base_checkpoint_id = SinkTxnStatus.STAGED, uri, base
    txn.rows, txn.staged_at, txn.finished_at = rows, utcnow(), None


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


def commit(s: Session, table: str, txn: SinkTransaction) -> None:
    sink = SINK_TABLES[table]
    # a job with a loop also reads its back-edge log: an epoch with no new source record is not a replay
    cut = cut_of(s, txn.job, txn.checkpoint_id) | back_edge_logs.loop_position(s, txn.job, txn.checkpoint_id)
    marks = watermarks(s, txn.job, txn.sink)
    if covered(cut, marks):
        txn.status, txn.rows, txn.finished_at = SinkTxnStatus.DEDUPLICATED, 0, utcnow()
        return
    rows = read_staged(txn.staged_uri, sink.columns, txn.base_checkpoint_id)
    upsert(s, sink, txn.checkpoint_id, rows)
    fault_point("sink.mid_commit", txn.checkpoint_id)
    set_watermarks(s, txn.job, txn.sink, {p: max(o, marks.get(p, 0)) for p, o in cut.items()}, txn.checkpoint_id)
    txn.status, txn.rows, txn.finished_at = SinkTxnStatus.COMMITTED, rows.num_rows, utcnow()


def revert_after(s: Session, job: str, sink_name: str, sink: SinkTable, checkpoint_id: int,
                 cut: dict[str, int], state_rows: pa.Table | None) -> int:
    """Put the sink back to checkpoint ``checkpoint_id`` (for a rewind): rows written later are
    deleted, then those keys that checkpoint's state holds (``state_rows``: sink columns and
    ``updated``) are written back with their values and checkpoint ids. Returns the rows touched."""
    deleted = s.execute(
        text(f"DELETE FROM {sink.table} WHERE checkpoint_id > :n RETURNING {sink.key}"), {"n": checkpoint_id}
    ).scalars().all()
    if deleted and state_rows is not None and state_rows.num_rows:
        back = state_rows.filter(pc.is_in(state_rows.column(sink.key), value_set=pa.array(deleted)))
        back = back.select(list(sink.columns)).append_column("checkpoint_id", back.column("updated"))
        upsert(s, sink, checkpoint_id, back)
    set_watermarks(s, job, sink_name, cut, checkpoint_id)
    return len(deleted)


def abort(txn: SinkTransaction) -> None:
    txn.status, txn.finished_at = SinkTxnStatus.ABORTED, utcnow()


def settle(s: Session, job: str, table: str) -> tuple[list[int], list[int]]:
    """Commit the staged transactions of completed checkpoints (in order) and abort the failed ones'.

    Returns (committed ids, aborted ids). A staged transaction of a still
    PENDING checkpoint stops the commits: later ones must wait for it.
    """
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
    for txn, status in rows:
        if status == CheckpointStatus.FAILED:
            abort(txn)
            aborted.append(txn.checkpoint_id)
        elif status == CheckpointStatus.PENDING:
            blocked = True
        elif not blocked:
            try:
                commit(s, table, txn)
            except (SQLAlchemyError, pa.ArrowException, OSError) as exc:
                # the database, the staged files: one line that names the checkpoint and the way on
                raise SinkCommitError(job, txn.checkpoint_id, table, exc) from exc
            committed.append(txn.checkpoint_id)
    return committed, aborted
