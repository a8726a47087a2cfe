"""Two-phase SQL sinks: stage a checkpoint's output, commit it when the checkpoint
completes, abort it when it fails.

A sink table ``<t>`` has a staging table ``<t>_staged`` keyed by
(checkpoint_id, key). Commit moves one checkpoint's staged rows into ``<t>``
with an upsert, in one transaction with the status change, so the table only
ever shows output as of a committed checkpoint. Transactions commit in
checkpoint order; committing is idempotent.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, delete, insert, select, text, update
from sqlalchemy.orm import Session

from coordinator.catalog.models import (
    Base,
    Checkpoint,
    SinkTransaction,
    WordcountCount,
    WordcountCountStaged,
    utcnow,
)
from coordinator.lifecycle import CheckpointStatus, SinkTxnStatus


@dataclass(frozen=True)
class SinkTable:
    table: type[Base]
    staged: type[Base]
    key: str
    values: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.key, *self.values)


SINK_TABLES: dict[str, SinkTable] = {
    "wordcount_counts": SinkTable(WordcountCount, WordcountCountStaged, "word", ("count",)),
}


def _copy_rows(conn: Connection, table: str, columns: Sequence[str], rows: Sequence[Sequence]) -> None:
    """PostgreSQL COPY: the fastest way to land tens of thousands of rows."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    buf.seek(0)
    raw = conn.connection.dbapi_connection
    with raw.cursor() as cur:
        cur.copy_expert(f"COPY {table} ({', '.join(columns)}) FROM STDIN WITH (FORMAT csv)", buf)


def _insert_staged(s: Session, sink: SinkTable, checkpoint_id: int, rows: Sequence[Sequence]) -> None:
    s.execute(delete(sink.staged).where(sink.staged.checkpoint_id == checkpoint_id))
    if not rows:
        return
    cols = ("checkpoint_id", *sink.columns)
    conn = s.connection()
    if conn.dialect.name == "postgresql":
        _copy_rows(conn, sink.staged.__tablename__, cols, [(checkpoint_id, *r) for r in rows])
    else:
        s.execute(insert(sink.staged), [dict(zip(cols, (checkpoint_id, *r))) for r in rows])


def _upsert_from_staged(s: Session, sink: SinkTable, checkpoint_id: int) -> None:
    t, st = sink.table.__tablename__, sink.staged.__tablename__
    cols = ", ".join(sink.columns)
    updates = ", ".join(f"{c} = excluded.{c}" for c in (*sink.values, "checkpoint_id"))
    # the same statement on PostgreSQL and SQLite (the WHERE keeps SQLite's parser unambiguous)
    s.execute(
        text(
            f"INSERT INTO {t} ({cols}, checkpoint_id) "
            f"SELECT {cols}, checkpoint_id FROM {st} WHERE checkpoint_id = :n "
            f"ON CONFLICT ({sink.key}) DO UPDATE SET {updates}"
        ),
        {"n": checkpoint_id},
    )
    s.execute(delete(sink.staged).where(sink.staged.checkpoint_id == checkpoint_id))


def stage(
    s: Session, job: str, sink_name: str, table: str, checkpoint_id: int, rows: Sequence[Sequence]
) -> None:
    """Pre-commit: the checkpoint's output rows, replacing any earlier attempt's."""
    sink = SINK_TABLES[table]
    _insert_staged(s, sink, checkpoint_id, rows)
    txn = s.get(SinkTransaction, (job, checkpoint_id, sink_name))
    if txn is None:
        s.add(
            SinkTransaction(
                job=job,
                checkpoint_id=checkpoint_id,
                sink=sink_name,
                status=SinkTxnStatus.STAGED,
                rows=len(rows),
                staged_at=utcnow(),
            )
        )
    else:
        txn.status, txn.rows, txn.staged_at, txn.finished_at = SinkTxnStatus.STAGED, len(rows), utcnow(), None


def write_direct(s: Session, table: str, checkpoint_id: int, rows: Sequence[Sequence]) -> None:
    """No-snapshot mode: output goes straight to the table (at-least-once, no transaction row)."""
    sink = SINK_TABLES[table]
    _insert_staged(s, sink, checkpoint_id, rows)
    _upsert_from_staged(s, sink, checkpoint_id)


def commit(s: Session, job: str, table: str, txn: SinkTransaction) -> None:
    _upsert_from_staged(s, SINK_TABLES[table], txn.checkpoint_id)
    txn.status, txn.finished_at = SinkTxnStatus.COMMITTED, utcnow()


def abort(s: Session, table: str, txn: SinkTransaction) -> None:
    sink = SINK_TABLES[table]
    s.execute(delete(sink.staged).where(sink.staged.checkpoint_id == txn.checkpoint_id))
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
            abort(s, table, txn)
            aborted.append(txn.checkpoint_id)
        elif status == CheckpointStatus.PENDING:
            blocked = True
        elif not blocked:
            commit(s, job, table, txn)
            committed.append(txn.checkpoint_id)
    return committed, aborted


def mark_txn(s: Session, job: str, checkpoint_id: int, status: SinkTxnStatus) -> None:
    s.execute(
        update(SinkTransaction)
        .where(SinkTransaction.job == job, SinkTransaction.checkpoint_id == checkpoint_id)
        .values(status=status, finished_at=utcnow())
    )
