"""The version of the job's declaration each checkpoint was taken with.

- ``job_versions``: one row per job and version (a digest of its graph, state schemas, sinks and sources,
  ``coordinator.dataflow.versions``), with the parts it was taken over and a one-line summary.
- ``checkpoints.job_version``: the version the run that took the checkpoint ran; NULL for checkpoints taken
  before this revision.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from coordinator.catalog.models import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_versions",
        sa.Column("job", sa.String(64), primary_key=True),
        sa.Column("digest", sa.String(16), primary_key=True),
        sa.Column("parts", sa.Text(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("first_run_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["job"], ["jobs.name"]),
    )
    # a plain add: batch mode would rebuild the table under the audit views that read checkpoints
    op.add_column("checkpoints", sa.Column("job_version", sa.String(16), nullable=True))


def downgrade() -> None:
    op.drop_column("checkpoints", "job_version")
    op.drop_table("job_versions")
