"""A content tag per segment, checked by every run that reads the segment.

- ``source_segments.content_tag``: ``<kind>:<value>``, recorded by inject with the segment
  (``xxh64:<hex>``, the XXH64 of the bytes inject read: ``coordinator.sources.segment_reader``); a run,
  a recovery's replay and ``verify`` refuse a segment whose content no longer has it
  (``coordinator.sources.segment_changes.check_before_run``).

Segments registered before this revision have no tag (NULL) and are checked by size and mtime as before.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain add: batch mode would rebuild the table, and no view reads the column
    op.add_column("source_segments", sa.Column("content_tag", sa.String(255), nullable=True))


def downgrade() -> None:
    op.drop_column("source_segments", "content_tag")
