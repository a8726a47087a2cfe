"""Epoch lineage and window watermarks, for jobs with several stateful operators.

- ``checkpoints.epoch_start``: the checkpoint whose cut starts the epoch that
  produced this one in its run (0: the start of the sources). Windows and joins
  depend on where epochs begin and end; `verify` replays exactly these epochs.
- ``task_acks.watermark``: a window operator's event-time watermark after the
  epoch (epoch ms), restored with its state.
- view ``operator_stats``: one row per checkpoint and operator (every stateful
  operator, every sink, every stateless one): subtasks acked, rows and bytes
  held, full or incremental, the slowest subtask's sync and async time, and a
  window's watermark.
- view ``checkpoint_stats`` names the sink of each transaction (``sink``): a
  job with several sinks has a row per checkpoint and sink.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


OPERATOR_STATS = """
    CREATE VIEW operator_stats AS
    SELECT job, checkpoint_id, operator,
           COUNT(*) AS acked_subtasks,
           SUM(state_rows) AS state_rows,
           SUM(state_bytes) AS state_bytes,
           MAX(CASE WHEN state_uri IS NOT NULL AND base_checkpoint_id IS NULL THEN 1 ELSE 0 END) AS full_snapshot,
           MAX(base_checkpoint_id) AS base_checkpoint_id,
           MAX(sync_ms) AS sync_ms,
           MAX(async_ms) AS async_ms,
           MAX(watermark) AS watermark
    FROM task_acks
    GROUP BY job, checkpoint_id, operator
"""


def checkpoint_stats(with_sink: bool) -> str:
    sink = "t.sink AS sink,\n               " if with_sink else ""
    return f"""
        CREATE VIEW checkpoint_stats AS
        SELECT c.job AS job,
               c.checkpoint_id AS checkpoint_id,
               c.snapshot_mode AS snapshot_mode,
               COALESCE(a.state_rows, 0) AS state_rows,
               a.max_sync_ms AS sync_ms,
               a.max_async_ms AS async_ms,
               COALESCE(d.dead_letters, 0) AS dead_letters,
               {sink}t.status AS sink_status,
               t.rows AS sink_rows,
               COALESCE(b.records, 0) AS back_edge_records,
               COALESCE(b.bytes, 0) AS back_edge_bytes,
               c.replay_of AS replay_of,
               c.recovery_id AS recovery_id
        FROM checkpoints c
        LEFT JOIN (
            SELECT job, checkpoint_id, SUM(state_rows) AS state_rows,
                   MAX(sync_ms) AS max_sync_ms, MAX(async_ms) AS max_async_ms
            FROM task_acks WHERE state_uri IS NOT NULL OR operator <> 'source'
            GROUP BY job, checkpoint_id
        ) a ON a.job = c.job AND a.checkpoint_id = c.checkpoint_id
        LEFT JOIN (
            SELECT job, checkpoint_id, COUNT(*) AS dead_letters FROM dead_letters GROUP BY job, checkpoint_id
        ) d ON d.job = c.job AND d.checkpoint_id = c.checkpoint_id
        LEFT JOIN (
            SELECT job, checkpoint_id, SUM(records) AS records, SUM(bytes) AS bytes
            FROM back_edge_logs GROUP BY job, checkpoint_id
        ) b ON b.job = c.job AND b.checkpoint_id = c.checkpoint_id
        LEFT JOIN sink_transactions t ON t.job = c.job AND t.checkpoint_id = c.checkpoint_id
        """


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("epoch_start", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("task_acks") as batch:
        batch.add_column(sa.Column("watermark", sa.BigInteger(), nullable=True))
    op.execute(OPERATOR_STATS)
    op.execute("DROP VIEW checkpoint_stats")
    op.execute(checkpoint_stats(with_sink=True))


def downgrade() -> None:
    op.execute("DROP VIEW operator_stats")
    op.execute("DROP VIEW checkpoint_stats")
    op.execute(checkpoint_stats(with_sink=False))
    # plain drops: batch mode would rebuild the tables under the audit views
    op.drop_column("task_acks", "watermark")
    op.drop_column("checkpoints", "epoch_start")
