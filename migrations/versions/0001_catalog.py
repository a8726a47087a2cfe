"""The catalog: jobs, checkpoints, source segments and cuts, task acks, sink
transactions, dead letters, the wordcount sink table, and the snapshot_history view.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from coordinator.catalog.models import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JOB_FK = sa.ForeignKeyConstraint(["job"], ["jobs.name"])


def checkpoint_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["job", "checkpoint_id"],
        ["checkpoints.job", "checkpoints.checkpoint_id"],
        name=f"fk_{table}_job_checkpoints",
    )


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("execution_graph", sa.Text(), nullable=False),
        sa.Column("total_tasks", sa.Integer(), nullable=False),
        sa.Column("last_checkpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("max_concurrent_pending", sa.Integer(), nullable=False),
        sa.Column("min_pause_ms", sa.BigInteger(), nullable=False),
        sa.Column("timeout_ms", sa.BigInteger(), nullable=False),
        sa.Column("tolerable_failures", sa.Integer(), nullable=False),
        sa.Column("retained", sa.Integer(), nullable=False),
        sa.Column("full_snapshot_every", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_jobs"),
    )
    op.create_table(
        "checkpoints",
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("failure_reason", sa.String(32), nullable=True),
        sa.Column("failure_detail", sa.Text(), nullable=True),
        sa.Column("total_tasks", sa.Integer(), nullable=False),
        sa.Column("snapshot_mode", sa.String(16), nullable=True),
        sa.Column("triggered_at", UTCDateTime(), nullable=False),
        sa.Column("completed_at", UTCDateTime(), nullable=True),
        sa.Column("failed_at", UTCDateTime(), nullable=True),
        sa.Column("subsumed_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("job", "checkpoint_id", name="pk_checkpoints"),
        sa.ForeignKeyConstraint(["job"], ["jobs.name"], name="fk_checkpoints_job_jobs"),
    )
    op.create_table(
        "source_segments",
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("first_offset", sa.BigInteger(), nullable=False),
        sa.Column("records", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("registered_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("job", "partition", "name", name="pk_source_segments"),
        sa.ForeignKeyConstraint(["job"], ["jobs.name"], name="fk_source_segments_job_jobs"),
    )
    op.create_table(
        "source_cuts",
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job", "checkpoint_id", "partition", name="pk_source_cuts"),
        checkpoint_fk("source_cuts"),
    )
    op.create_table(
        "task_acks",
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("operator", sa.String(64), nullable=False),
        sa.Column("subtask", sa.Integer(), nullable=False),
        sa.Column("state_uri", sa.Text(), nullable=True),
        sa.Column("base_checkpoint_id", sa.BigInteger(), nullable=True),
        sa.Column("state_bytes", sa.BigInteger(), nullable=False),
        sa.Column("state_rows", sa.BigInteger(), nullable=False),
        sa.Column("checksum", sa.String(64), nullable=True),
        sa.Column("alignment_ms", sa.BigInteger(), nullable=False),
        sa.Column("sync_ms", sa.BigInteger(), nullable=False),
        sa.Column("async_ms", sa.BigInteger(), nullable=False),
        sa.Column("acked_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("job", "checkpoint_id", "operator", "subtask", name="pk_task_acks"),
        checkpoint_fk("task_acks"),
    )
    op.create_table(
        "sink_transactions",
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("sink", sa.String(64), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("staged_uri", sa.Text(), nullable=True),
        sa.Column("base_checkpoint_id", sa.BigInteger(), nullable=True),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("staged_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("job", "checkpoint_id", "sink", name="pk_sink_transactions"),
        checkpoint_fk("sink_transactions"),
    )
    op.create_table(
        "dead_letters",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
        sa.Column("segment", sa.String(255), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_dead_letters"),
        sa.ForeignKeyConstraint(["job"], ["jobs.name"], name="fk_dead_letters_job_jobs"),
    )
    op.create_table(
        "wordcount_counts",
        sa.Column("word", sa.String(512), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("word", name="pk_wordcount_counts"),
    )
    create_snapshot_history()
    create_checkpoint_stats()


def duration_ms_sql() -> str:
    if op.get_bind().dialect.name == "postgresql":
        return "CAST(EXTRACT(EPOCH FROM (c.completed_at - c.triggered_at)) * 1000 AS BIGINT)"
    return "CAST(ROUND((julianday(c.completed_at) - julianday(c.triggered_at)) * 86400000) AS INTEGER)"


def create_snapshot_history() -> None:
    # The public audit interface: one row per checkpoint. Keep its columns stable.
    op.execute(
        f"""
        CREATE VIEW snapshot_history AS
        SELECT c.job AS job,
               c.checkpoint_id AS checkpoint_id,
               c.status AS status,
               c.triggered_at AS triggered_at,
               c.completed_at AS completed_at,
               {duration_ms_sql()} AS duration_ms,
               COALESCE(a.state_bytes, 0) AS state_bytes,
               COALESCE(a.acked_tasks, 0) AS acked_tasks,
               c.total_tasks AS total_tasks,
               c.failure_reason AS failure_reason
        FROM checkpoints c
        LEFT JOIN (
            SELECT job, checkpoint_id, SUM(state_bytes) AS state_bytes, COUNT(*) AS acked_tasks
            FROM task_acks GROUP BY job, checkpoint_id
        ) a ON a.job = c.job AND a.checkpoint_id = c.checkpoint_id
        """
    )


def create_checkpoint_stats() -> None:
    # companion of snapshot_history: what each checkpoint held beyond its status
    op.execute(
        """
        CREATE VIEW checkpoint_stats AS
        SELECT c.job AS job,
               c.checkpoint_id AS checkpoint_id,
               c.snapshot_mode AS snapshot_mode,
               COALESCE(a.state_rows, 0) AS state_rows,
               a.max_sync_ms AS sync_ms,
               a.max_async_ms AS async_ms,
               COALESCE(d.dead_letters, 0) AS dead_letters,
               t.status AS sink_status,
               t.rows AS sink_rows
        FROM checkpoints c
        LEFT JOIN (
            SELECT job, checkpoint_id, SUM(state_rows) AS state_rows,
                   MAX(sync_ms) AS max_sync_ms, MAX(async_ms) AS max_async_ms
            FROM task_acks WHERE state_uri IS NOT NULL OR operator <> 'source'
            GROUP BY job, checkpoint_id
        ) a ON a.job = c.job AND a.checkpoint_id = c.checkpoint_id
        LEFT JOIN (
            SELECT job, checkpoint_id, COUNT(*) AS dead_letters FROM dead_letters GROUP BY job, checkpoint_id
        ) d ON d.job = c.job AND d.checkpoint_id = c.checkpoint_id
        LEFT JOIN sink_transactions t ON t.job = c.job AND t.checkpoint_id = c.checkpoint_id
        """
    )


def downgrade() -> None:
    op.execute("DROP VIEW checkpoint_stats")
    op.execute("DROP VIEW snapshot_history")
    for table in (
        "wordcount_counts",
        "dead_letters",
        "sink_transactions",
        "task_acks",
        "source_cuts",
        "source_segments",
        "checkpoints",
        "jobs",
    ):
        op.drop_table(table)
