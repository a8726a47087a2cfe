"""Upgrades of a job to a new version of its declaration.

- ``upgrades``: one row per upgrade, beside its ``recoveries`` row (kind ``upgrade``), which audits it like a
  recovery: the versions it went from and to, the checkpoint whose cut its replay started at (0: the start
  of the input), what it rebuilt (the plan's parts, as JSON) and who asked.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from coordinator.catalog.models import UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "upgrades",
        sa.Column("recovery_id", sa.Integer(), primary_key=True),
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("from_version", sa.String(16), nullable=True),
        sa.Column("to_version", sa.String(16), nullable=False),
        sa.Column("replayed_from", sa.BigInteger(), nullable=False),
        sa.Column("upgraded_checkpoint", sa.BigInteger(), nullable=False),
        sa.Column("parts", sa.Text(), nullable=False),
        sa.Column("requested_by", sa.String(250), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["recovery_id"], ["recoveries.id"]),
        sa.ForeignKeyConstraint(["job"], ["jobs.name"]),
    )


def downgrade() -> None:
    op.drop_table("upgrades")
