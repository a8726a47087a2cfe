"""How each store task found its store: the per-task statistics of executor-local stores.

- ``task_acks.store_event``: ``hit`` (the executor held the store at the version the epoch started from) or
  ``reload`` (the task built it from the checkpoint files); NULL for a task with no local store.
- ``task_acks.store_load_ms``: the milliseconds a reload took (0 for a hit).
- ``task_acks.store_location``: the executor the task ran on, which holds the store now
  (``executor_<host>_<executor id>``): the next run's tasks prefer its host (``spark_jobs.state.placement``).

A group of epochs run together (a catch-up) opens its stores once: its first epoch's acks carry the events.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("task_acks") as batch:
        batch.add_column(sa.Column("store_event", sa.String(8), nullable=True))
        batch.add_column(sa.Column("store_load_ms", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("store_location", sa.String(255), nullable=True))


def downgrade() -> None:
    # plain drops: batch mode would rebuild the table under the audit views
    op.drop_column("task_acks", "store_location")
    op.drop_column("task_acks", "store_load_ms")
    op.drop_column("task_acks", "store_event")
