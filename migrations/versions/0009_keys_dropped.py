"""Keys a state TTL dropped, in the per-task statistics.

- ``task_acks.keys_dropped``: the keys an operator's state TTL (``ttl_epochs``) dropped in this subtask
  in the checkpoint's epoch (``coordinator.dataflow.ttl``); 0 for every other task.
- view ``operator_stats`` adds ``keys_dropped``, the sum over the operator's subtasks.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def operator_stats(with_keys_dropped: bool) -> str:
    dropped = ",\n           SUM(keys_dropped) AS keys_dropped" if with_keys_dropped else ""
    return f"""
    CREATE VIEW operator_stats AS
    SELECT job, checkpoint_id, operator,
           COUNT(*) AS acked_subtasks,
           SUM(state_rows) AS state_rows,
           SUM(state_bytes) AS state_bytes,
           MAX(CASE WHEN state_uri IS NOT NULL AND base_checkpoint_id IS NULL THEN 1 ELSE 0 END) AS full_snapshot,
           MAX(base_checkpoint_id) AS base_checkpoint_id,
           MAX(sync_ms) AS sync_ms,
           MAX(async_ms) AS async_ms,
           MAX(watermark) AS watermark{dropped}
    FROM task_acks
    GROUP BY job, checkpoint_id, operator
"""


def upgrade() -> None:
    # the view reads task_acks: dropped around the change (batch mode may rebuild the table)
    op.execute("DROP VIEW operator_stats")
    with op.batch_alter_table("task_acks") as batch:
        batch.add_column(sa.Column("keys_dropped", sa.BigInteger(), nullable=False, server_default="0"))
    op.execute(operator_stats(with_keys_dropped=True))


def downgrade() -> None:
    op.execute("DROP VIEW operator_stats")
    # a plain drop: batch mode would rebuild the table under the other audit views
    op.drop_column("task_acks", "keys_dropped")
    op.execute(operator_stats(with_keys_dropped=False))
