"""Recovery and loops: recoveries, sink high-water marks, the record-id store
(Bloom filters + exact ids + watermark), back-edge logs, the cc_labels sink;
checkpoints learn SUPERSEDED (superseded_at, replay_of, recovery_id), and
checkpoint_stats shows back-edge logs and replays.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import sqlalchemy as sa
from alembic import op

from coordinator.catalog.models import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def job_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["job"], ["jobs.name"], name=f"fk_{table}_job_jobs")


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("superseded_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("replay_of", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("recovery_id", sa.BigInteger(), nullable=True))
    op.create_table(
        "recoveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("requested_checkpoint_id", sa.BigInteger(), nullable=True),
        sa.Column("from_checkpoint_id", sa.BigInteger(), nullable=True),
        sa.Column("to_checkpoint_id", sa.BigInteger(), nullable=True),
        sa.Column("superseded", sa.Integer(), nullable=False),
        sa.Column("back_edge_records", sa.BigInteger(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("result", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_recoveries"),
        job_fk("recoveries"),
    )
    op.create_table(
        "sink_watermarks",
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("sink", sa.String(64), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job", "sink", "partition", name="pk_sink_watermarks"),
        job_fk("sink_watermarks"),
    )
    op.create_table(
        "record_ids",
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("record_id", sa.String(255), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job", "record_id", name="pk_record_ids"),
        job_fk("record_ids"),
    )
    op.create_index("ix_record_ids_job_window", "record_ids", ["job", "window_start"])
    op.create_table(
        "id_filters",
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("bits", sa.LargeBinary(), nullable=False),
        sa.Column("items", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job", "window_start", name="pk_id_filters"),
        job_fk("id_filters"),
    )
    op.create_table(
        "id_watermarks",
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("watermark", sa.BigInteger(), nullable=False),
        sa.Column("max_event_time", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job", name="pk_id_watermarks"),
        job_fk("id_watermarks"),
    )
    op.create_table(
        "back_edge_logs",
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("operator", sa.String(64), nullable=False),
        sa.Column("subtask", sa.Integer(), nullable=False),
        sa.Column("uri", sa.Text(), nullable=True),
        sa.Column("records", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("checksum", sa.String(64), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("job", "checkpoint_id", "operator", "subtask", name="pk_back_edge_logs"),
        sa.ForeignKeyConstraint(
            ["job", "checkpoint_id"], ["checkpoints.job", "checkpoints.checkpoint_id"],
            name="fk_back_edge_logs_job_checkpoints",
        ),
    )
    op.create_table(
        "cc_labels",
        sa.Column("vertex", sa.BigInteger(), nullable=False),
        sa.Column("component", sa.BigInteger(), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("vertex", name="pk_cc_labels"),
    )
    op.execute("DROP VIEW checkpoint_stats")
    op.execute(checkpoint_stats(with_loops=True))


def checkpoint_stats(with_loops: bool) -> str:
    """The companion of snapshot_history: what each checkpoint held beyond its status
    (``with_loops``: back-edge logs and replays, added by this revision)."""
    loop_columns = """,
               COALESCE(b.records, 0) AS back_edge_records,
               COALESCE(b.bytes, 0) AS back_edge_bytes,
               c.replay_of AS replay_of,
               c.recovery_id AS recovery_id"""
    loop_join = """
        LEFT JOIN (
            SELECT job, checkpoint_id, SUM(records) AS records, SUM(bytes) AS bytes
            FROM back_edge_logs GROUP BY job, checkpoint_id
        ) b ON b.job = c.job AND b.checkpoint_id = c.checkpoint_id"""
    return f"""
        CREATE VIEW checkpoint_stats AS
        SELECT c.job AS job,
               c.checkpoint_id AS checkpoint_id,
               c.snapshot_mode AS snapshot_mode,
               COALESCE(a.state_rows, 0) AS state_rows,
               a.max_sync_ms AS sync_ms,
               a.max_async_ms AS async_ms,
               COALESCE(d.dead_letters, 0) AS dead_letters,
               t.status AS sink_status,
               t.rows AS sink_rows{loop_columns if with_loops else ""}
        FROM checkpoints c
        LEFT JOIN (
            SELECT job, checkpoint_id, SUM(state_rows) AS state_rows,
                   MAX(sync_ms) AS max_sync_ms, MAX(async_ms) AS max_async_ms
            FROM task_acks WHERE state_uri IS NOT NULL OR operator <> 'source'
            GROUP BY job, checkpoint_id
        ) a ON a.job = c.job AND a.checkpoint_id = c.checkpoint_id
        LEFT JOIN (
            SELECT job, checkpoint_id, COUNT(*) AS dead_letters FROM dead_letters GROUP BY job, checkpoint_id
        ) d ON d.job = c.job AND d.checkpoint_id = c.checkpoint_id{loop_join if with_loops else ""}
        LEFT JOIN sink_transactions t ON t.job = c.job AND t.checkpoint_id = c.checkpoint_id
        """


def downgrade() -> None:
    # SQLite rebuilds a table to drop its columns: the views over it go first, then come back
    op.execute("DROP VIEW checkpoint_stats")
    op.execute("DROP VIEW snapshot_history")
    for table in ("cc_labels", "back_edge_logs", "id_watermarks", "id_filters", "record_ids",
                  "sink_watermarks", "recoveries"):
        op.drop_table(table)
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("recovery_id")
        batch.drop_column("replay_of")
        batch.drop_column("superseded_at")
    _revision_0001().create_snapshot_history()
    op.execute(checkpoint_stats(with_loops=False))


def _revision_0001():
    """The 0001 migration module (its file name is not an importable module name)."""
    spec = importlib.util.spec_from_file_location("abs_revision_0001", Path(__file__).with_name("0001_catalog.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
