"""A dead letter's exact bytes, whatever its record held.

- ``dead_letters.payload_bytes``: the bytes a dead letter keeps of its record when they are not UTF-8 text
  without NUL (PostgreSQL's text refuses NUL); NULL when ``payload`` is exactly their UTF-8
  (``coordinator.catalog.models.dead_letter_columns``). ``payload`` stays readable text, with NUL and
  undecodable bytes escaped.

Rows recorded before this revision keep their ``payload`` as it was (undecodable bytes escaped, no bytes).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain add: batch mode would rebuild the table under the audit views that count dead letters
    op.add_column("dead_letters", sa.Column("payload_bytes", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    op.drop_column("dead_letters", "payload_bytes")
