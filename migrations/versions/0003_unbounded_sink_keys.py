"""Sink keys of any length: wordcount_counts.word becomes TEXT.

VARCHAR(512) let SQLite store a 600-character word while PostgreSQL refused it,
so one long token made every later commit of the job fail on PostgreSQL. What
one backend accepts, the other must accept too.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("wordcount_counts") as batch:
        batch.alter_column("word", type_=sa.Text(), existing_type=sa.String(512), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("wordcount_counts") as batch:
        batch.alter_column("word", type_=sa.String(512), existing_type=sa.Text(), existing_nullable=False)
