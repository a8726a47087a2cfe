"""Epoch lineage and window watermarks, for jobs with several stateful operators.

- ``checkpoints.epoch_start``: the checkpoint whose cut starts the epoch that
  produced this one in its run (0: the start of the sources). Windows and joins
  depend on where epochs begin and end; `verify` replays exactly these epochs.
- ``task_acks.watermark``: a window operator's event-time watermark after the
  epoch (epoch ms), restored with its state.

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


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("epoch_start", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("task_acks") as batch:
        batch.add_column(sa.Column("watermark", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    # plain drops: batch mode would rebuild the tables under the audit views
    op.drop_column("task_acks", "watermark")
    op.drop_column("checkpoints", "epoch_start")
