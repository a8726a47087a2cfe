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
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from sqlalchemy import select
from sqlalchemy.orm import Session

from coordinator import state_files
from coordinator.catalog.models import Checkpoint, SinkTransaction, utcnow
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
}


def read_staged(uri: str, columns: tuple[str, ...], base: int | None) -> pa.Table:
    """The rows of a staged output: the files under ``uri`` with updated > base."""
    if not state_files.exists(uri):
        return pa.table({c: [] for c in columns})
    fs, path = state_files.filesystem(uri)
    dataset = ds.dataset(path, filesystem=fs, format="parquet", partitioning="hive")
    flt = None if base is None else pc.field("updated") > base
    return dataset.to_table(columns=list(columns), filter=flt)


def upsert(s: Session, sink: SinkTable, checkpoint_id: int, rows: pa.Table) -> None:
    """Insert or replace rows (key, values...) of the sink table, stamped with the checkpoint."""
    if rows.num_rows == 0:
        return
    cols = (*sink.columns, "checkpoint_id")
    data = [rows.column(c).to_pylist() for c in sink.columns]
    conn = s.connection()
    raw = conn.connection.dbapi_connection
    updates = ", ".join(f"{c} = excluded.{c}" for c in (*sink.values, "checkpoint_id"))
    conflict = f"ON CONFLICT ({sink.key}) DO UPDATE SET {updates}"
    if conn.dialect.name == "postgresql":
        # COPY into a temporary table, then one set-based upsert: far faster than row inserts
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(zip(*data, [checkpoint_id] * rows.num_rows))
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
            zip(*data, [checkpoint_id] * rows.num_rows),
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


def commit(s: Session, table: str, txn: SinkTransaction) -> None:
    sink = SINK_TABLES[table]
    upsert(s, sink, txn.checkpoint_id, read_staged(txn.staged_uri, sink.columns, txn.base_checkpoint_id))
    txn.status, txn.finished_at = SinkTxnStatus.COMMITTED, utcnow()


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
            commit(s, table, txn)
            committed.append(txn.checkpoint_id)
    return committed, aborted
