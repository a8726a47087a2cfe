"""Sink tables belong to their sinks, not to the catalog's schema.

Jobs are declared with the public API now, and a SQL sink creates its table
from the columns the job declares (``coordinator.sinks.sql_table``), with its
commit record beside it. Revisions 0001 and 0002 created the two reference
jobs' tables (``wordcount_counts``, ``cc_labels``); an empty one is dropped
here, so a new catalog holds nothing of any job, and the sink creates it again
with the same shape when the job first commits. One that holds rows is kept:
its sink adopts it (same columns) and nothing committed is lost.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

FORMER = ("wordcount_counts", "cc_labels")


def upgrade() -> None:
    conn = op.get_bind()
    inspector = sa.inspect(conn)
    for table in FORMER:
        if inspector.has_table(table) and conn.execute(sa.text(f"SELECT 1 FROM {table} LIMIT 1")).first() is None:
            op.drop_table(table)


def downgrade() -> None:
    # revisions before this one own the tables again: give them back (empty) where a sink has not made them
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("wordcount_counts"):
        op.create_table(
            "wordcount_counts",
            sa.Column("word", sa.Text(), nullable=False),
            sa.Column("count", sa.BigInteger(), nullable=False),
            sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
            sa.PrimaryKeyConstraint("word", name="pk_wordcount_counts"),
        )
    if not inspector.has_table("cc_labels"):
        op.create_table(
            "cc_labels",
            sa.Column("vertex", sa.BigInteger(), nullable=False),
            sa.Column("component", sa.BigInteger(), nullable=False),
            sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
            sa.PrimaryKeyConstraint("vertex", name="pk_cc_labels"),
        )
