"""Recoveries asked for from Airflow, and refused ones.

- ``recoveries.airflow_run_id``: the run of ``abs_<job>_recover`` that asked for the recovery (NULL from the
  command line); the view follows a run it started through it, and shows its refusal or failure.
- ``recoveries.result`` may be ``REFUSED`` (a String column: no schema change): the request stopped before
  anything changed (a processing run held the job's lease, the checkpoint was not COMPLETED); ``detail`` says why.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("recoveries") as batch:
        batch.add_column(sa.Column("airflow_run_id", sa.String(250), nullable=True))
        batch.create_index("ix_recoveries_airflow_run_id", ["airflow_run_id"])


def downgrade() -> None:
    with op.batch_alter_table("recoveries") as batch:
        batch.drop_index("ix_recoveries_airflow_run_id")
        batch.drop_column("airflow_run_id")
