"""Fencing tokens, verified staged output, segment checksums, key groups.

- ``jobs.fencing_token``: bumped by every processing run when it takes the
  job's checkpoints; every ack and stage transaction of the run checks it, so a
  run that lost its lease (a dropped connection) can no longer write.
- ``jobs.max_parallelism``: the number of key groups state is split into, fixed
  for the life of the job, so parallelism can change between runs.
- ``checkpoints.parallelism``: the parallelism the checkpoint was taken at.
- ``sink_transactions.files/bytes/checksum``: what the staged output was when it
  was acked; a commit verifies the files before it writes a row.
- ``source_segments.checksum/mtime_ns``: a segment's content as inject saw it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("fencing_token", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("max_parallelism", sa.Integer(), nullable=False, server_default="128"))
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("parallelism", sa.Integer(), nullable=True))
    with op.batch_alter_table("sink_transactions") as batch:
        batch.add_column(sa.Column("files", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("bytes", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("checksum", sa.String(64), nullable=True))
    with op.batch_alter_table("source_segments") as batch:
        batch.add_column(sa.Column("checksum", sa.String(64), nullable=True))
        batch.add_column(sa.Column("mtime_ns", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    # plain DROP COLUMN (SQLite >= 3.35): a batch rebuild would break the views over these tables
    for table, column in (("source_segments", "mtime_ns"), ("source_segments", "checksum"),
                          ("sink_transactions", "checksum"), ("sink_transactions", "bytes"),
                          ("sink_transactions", "files"), ("checkpoints", "parallelism"),
                          ("jobs", "max_parallelism"), ("jobs", "fencing_token")):
        op.drop_column(table, column)
