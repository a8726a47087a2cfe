"""ORM models of the catalog (SQLAlchemy 2, typed). Alembic migrations mirror them.

One declarative base with a naming convention; status columns are StrEnums
stored as strings; every timestamp is UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

from sqlalchemy import (
    BigInteger,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from coordinator.checkpoints.lifecycle import CheckpointStatus, FailureReason, SinkTxnStatus

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in Python; timestamptz on PostgreSQL, naive UTC text on SQLite."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the catalog; use UTC-aware datetimes")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


def enum_column(enum: type[StrEnum], nullable: bool = False) -> Mapped:
    # plain strings (not native enums) so the same migration serves SQLite and PostgreSQL
    return mapped_column(String(32), nullable=nullable)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Job(Base):
    __tablename__ = "jobs"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    execution_graph: Mapped[str] = mapped_column(Text)
    total_tasks: Mapped[int] = mapped_column(Integer)
    # the checkpoint id counter: bumped under the row lock, so ids strictly increase
    last_checkpoint_id: Mapped[int] = mapped_column(BigInteger, default=0)
    max_concurrent_pending: Mapped[int] = mapped_column(Integer)
    min_pause_ms: Mapped[int] = mapped_column(BigInteger)
    timeout_ms: Mapped[int] = mapped_column(BigInteger)
    tolerable_failures: Mapped[int] = mapped_column(Integer)
    retained: Mapped[int] = mapped_column(Integer)
    full_snapshot_every: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    #: bumped by each processing run when it takes the job's checkpoints; its acks and stages check it
    fencing_token: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    #: key groups: state is split into this many, fixed for the job's life, so parallelism can change
    max_parallelism: Mapped[int] = mapped_column(Integer, default=128, server_default="128")


class Checkpoint(Base):
    __tablename__ = "checkpoints"
    __table_args__ = (ForeignKeyConstraint(["job"], ["jobs.name"]),)

    job: Mapped[str] = mapped_column(String(64), primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    status: Mapped[CheckpointStatus] = enum_column(CheckpointStatus)
    failure_reason: Mapped[FailureReason | None] = enum_column(FailureReason, nullable=True)
    failure_detail: Mapped[str | None] = mapped_column(Text)
    total_tasks: Mapped[int] = mapped_column(Integer)
    snapshot_mode: Mapped[str | None] = mapped_column(String(16))
    triggered_at: Mapped[datetime] = mapped_column(UTCDateTime)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    failed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    subsumed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    superseded_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    #: set on a checkpoint created by a recovery/rewind: it re-does the epoch that ended at this checkpoint's cut
    replay_of: Mapped[int | None] = mapped_column(BigInteger)
    recovery_id: Mapped[int | None] = mapped_column(BigInteger)
    #: the parallelism of the run that took it (None: before key groups were recorded)
    parallelism: Mapped[int | None] = mapped_column(Integer)
    # the checkpoint whose cut starts the epoch that produced this one (0: the start of the sources)
    epoch_start: Mapped[int | None] = mapped_column(BigInteger)
    #: the digest of the job's declaration the run that took it ran (``job_versions``; None: before revision 0012)
    job_version: Mapped[str | None] = mapped_column(String(16))


class JobVersionRow(Base):
    """A version of a job's declaration (``coordinator.dataflow.versions``), from the first run that ran it."""

    __tablename__ = "job_versions"
    __table_args__ = (ForeignKeyConstraint(["job"], ["jobs.name"]),)

    job: Mapped[str] = mapped_column(String(64), primary_key=True)
    digest: Mapped[str] = mapped_column(String(16), primary_key=True)
    #: the parts the digest was taken over, as JSON: what a later version is compared with
    parts: Mapped[str] = mapped_column(Text)
    summary: Mapped[str] = mapped_column(Text)
    first_run_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class SourceSegment(Base):
    """A landed, immutable segment file; its records get offsets first_offset.. in its partition."""

    __tablename__ = "source_segments"
    __table_args__ = (ForeignKeyConstraint(["job"], ["jobs.name"]),)

    job: Mapped[str] = mapped_column(String(64), primary_key=True)
    partition: Mapped[str] = mapped_column(String(255), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    first_offset: Mapped[int] = mapped_column(BigInteger)
    records: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int] = mapped_column(BigInteger)
    registered_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    #: the content as inject read it (sha256) and the file's mtime then; inject records a newer mtime
    #: once it found the content unchanged (coordinator.sources.segment_changes), so it is not hashed again
    checksum: Mapped[str | None] = mapped_column(String(64))
    mtime_ns: Mapped[int | None] = mapped_column(BigInteger)
    #: what a run checks the file against before reading it, ``<kind>:<value>`` (a kind per way of telling a
    #: file's content: ``xxh64`` of the bytes for a segment file, ``coordinator.sources.segment_reader``);
    #: None for a Delta version (its commit is checked) and for segments registered before revision 0010
    content_tag: Mapped[str | None] = mapped_column(String(255))


class SourceCut(Base):
    """Barrier n's position in one partition: epoch n holds offsets below ``offset``."""

    __tablename__ = "source_cuts"
    __table_args__ = (
        ForeignKeyConstraint(["job", "checkpoint_id"], ["checkpoints.job", "checkpoints.checkpoint_id"]),
    )

    job: Mapped[str] = mapped_column(String(64), primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    partition: Mapped[str] = mapped_column(String(255), primary_key=True)
    offset: Mapped[int] = mapped_column(BigInteger)


class TaskAck(Base):
    """One task's acknowledgement of a checkpoint, with its state handle and stats."""

    __tablename__ = "task_acks"
    __table_args__ = (
        ForeignKeyConstraint(["job", "checkpoint_id"], ["checkpoints.job", "checkpoints.checkpoint_id"]),
    )

    job: Mapped[str] = mapped_column(String(64), primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    operator: Mapped[str] = mapped_column(String(64), primary_key=True)
    subtask: Mapped[int] = mapped_column(Integer, primary_key=True)
    state_uri: Mapped[str | None] = mapped_column(Text)
    # incremental snapshots: the checkpoint whose state this one's file is a delta on
    base_checkpoint_id: Mapped[int | None] = mapped_column(BigInteger)
    state_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    state_rows: Mapped[int] = mapped_column(BigInteger, default=0)
    checksum: Mapped[str | None] = mapped_column(String(64))
    alignment_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    sync_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    async_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    # a window operator's event-time watermark after the epoch (epoch ms)
    watermark: Mapped[int | None] = mapped_column(BigInteger)
    # a local store's task: "hit" (its executor held the store) or "reload" (built from the files), and how long
    store_event: Mapped[str | None] = mapped_column(String(8))
    store_load_ms: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # and the executor it ran on, which holds the store now: executor_<host>_<executor id>
    store_location: Mapped[str | None] = mapped_column(String(255))
    # keys the operator's state TTL dropped in this subtask in the checkpoint's epoch
    keys_dropped: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    acked_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class SinkTransaction(Base):
    """A sink's pre-committed output for one checkpoint: STAGED, then COMMITTED or ABORTED."""

    __tablename__ = "sink_transactions"
    __table_args__ = (
        ForeignKeyConstraint(["job", "checkpoint_id"], ["checkpoints.job", "checkpoints.checkpoint_id"]),
    )

    job: Mapped[str] = mapped_column(String(64), primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    sink: Mapped[str] = mapped_column(String(64), primary_key=True)
    status: Mapped[SinkTxnStatus] = enum_column(SinkTxnStatus)
    #: the staged output: Parquet files whose rows with updated > base_checkpoint_id are this txn's
    staged_uri: Mapped[str | None] = mapped_column(Text)
    base_checkpoint_id: Mapped[int | None] = mapped_column(BigInteger)
    rows: Mapped[int] = mapped_column(BigInteger)
    staged_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    #: the staged files as acked (count, bytes, sha256 over names and contents): a commit verifies them
    files: Mapped[int | None] = mapped_column(Integer)
    bytes: Mapped[int | None] = mapped_column(BigInteger)
    checksum: Mapped[str | None] = mapped_column(String(64))


def storable_text(text: str | bytes) -> str:
    """``text`` as text both catalogs store (PostgreSQL refuses NUL, UTF-8 a lone surrogate): NUL and what is
    not UTF-8 as backslash escapes (``\\x00``, ``\\xff``), the rest as it is."""
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "backslashreplace")
    return raw.decode("utf-8", "backslashreplace").replace("\x00", "\\x00")


def dead_letter_columns(reason: str, record: bytes) -> dict[str, str | bytes | None]:
    """A dead letter's ``reason``, ``payload`` and ``payload_bytes`` for the bytes it keeps of its record:
    ``payload`` readable (``storable_text``), ``payload_bytes`` the exact bytes when ``payload`` is not
    their UTF-8, so nothing is stored twice and every record is kept whole (``record_bytes``)."""
    payload = storable_text(record)
    return {"reason": storable_text(reason), "payload": payload,
            "payload_bytes": None if payload.encode("utf-8") == record else record}


def record_bytes(payload: str, payload_bytes: bytes | None) -> bytes:
    """The exact bytes a dead letter kept of its record (``dead_letter_columns``)."""
    return payload.encode("utf-8") if payload_bytes is None else payload_bytes


class DeadLetter(Base):
    """A record that could not be processed (e.g. not UTF-8), kept instead of dropped silently. Its
    ``payload`` is readable text; ``payload_bytes`` holds the record's bytes when they are not UTF-8 text
    without NUL (``dead_letter_columns``)."""

    __tablename__ = "dead_letters"
    __table_args__ = (ForeignKeyConstraint(["job"], ["jobs.name"]),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job: Mapped[str] = mapped_column(String(64))
    checkpoint_id: Mapped[int] = mapped_column(BigInteger)
    partition: Mapped[str] = mapped_column(String(255))
    segment: Mapped[str] = mapped_column(String(255))
    offset: Mapped[int] = mapped_column(BigInteger)
    reason: Mapped[str] = mapped_column(Text)
    payload: Mapped[str] = mapped_column(Text)
    payload_bytes: Mapped[bytes | None] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    @property
    def record(self) -> bytes:
        return record_bytes(self.payload, self.payload_bytes)


class Recovery(Base):
    """One `recover` or `rewind`: from which checkpoint, how, and how it ended."""

    __tablename__ = "recoveries"
    __table_args__ = (ForeignKeyConstraint(["job"], ["jobs.name"]),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))  # recover | rewind | upgrade
    mode: Mapped[str] = mapped_column(String(16))  # full | partial
    #: the checkpoint asked for (None: latest completed) and the one restored (differs after --fallback)
    requested_checkpoint_id: Mapped[int | None] = mapped_column(BigInteger)
    from_checkpoint_id: Mapped[int | None] = mapped_column(BigInteger)
    #: the newest checkpoint completed by the run that resumed after the restore
    to_checkpoint_id: Mapped[int | None] = mapped_column(BigInteger)
    superseded: Mapped[int] = mapped_column(Integer, default=0)
    back_edge_records: Mapped[int] = mapped_column(BigInteger, default=0)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    result: Mapped[str] = mapped_column(String(16))  # RUNNING | SUCCEEDED | FAILED | REFUSED (nothing changed)
    detail: Mapped[str | None] = mapped_column(Text)
    #: the run of the job's recover DAG that asked for it (None: the command line)
    airflow_run_id: Mapped[str | None] = mapped_column(String(250), index=True)


class Upgrade(Base):
    """One `upgrade` of a job to a new version of its declaration (``coordinator.upgrades.upgrade``); its
    ``recoveries`` row (kind ``upgrade``) says how it ran and ended."""

    __tablename__ = "upgrades"
    __table_args__ = (ForeignKeyConstraint(["recovery_id"], ["recoveries.id"]),
                      ForeignKeyConstraint(["job"], ["jobs.name"]))

    recovery_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job: Mapped[str] = mapped_column(String(64))
    #: the version of the newest completed checkpoint before it (None: taken before versions were recorded)
    from_version: Mapped[str | None] = mapped_column(String(16))
    to_version: Mapped[str] = mapped_column(String(16))
    #: the checkpoint whose cut the replay starts at (0: the start of the input)
    replayed_from: Mapped[int] = mapped_column(BigInteger)
    #: the newest completed checkpoint when it started: the replay rebuilds every epoch up to it
    upgraded_checkpoint: Mapped[int] = mapped_column(BigInteger)
    #: the plan it carried out (``coordinator.dataflow.changes``): each part, its change and what was done
    parts: Mapped[str] = mapped_column(Text)
    #: the user (or the Airflow run) that asked
    requested_by: Mapped[str] = mapped_column(String(250))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class SinkWatermark(Base):
    """A sink's high-water mark per source partition, written in the transaction of its output."""

    __tablename__ = "sink_watermarks"
    __table_args__ = (ForeignKeyConstraint(["job"], ["jobs.name"]),)

    job: Mapped[str] = mapped_column(String(64), primary_key=True)
    sink: Mapped[str] = mapped_column(String(64), primary_key=True)
    partition: Mapped[str] = mapped_column(String(255), primary_key=True)
    #: every record of the partition below this offset is in the sink's output
    offset: Mapped[int] = mapped_column(BigInteger)
    checkpoint_id: Mapped[int] = mapped_column(BigInteger)


class RecordId(Base):
    """The exact id store behind the Bloom filters: ids seen per event-time window."""

    __tablename__ = "record_ids"
    __table_args__ = (
        ForeignKeyConstraint(["job"], ["jobs.name"]),
        Index("ix_record_ids_job_window", "job", "window_start"),
    )

    job: Mapped[str] = mapped_column(String(64), primary_key=True)
    record_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    window_start: Mapped[int] = mapped_column(BigInteger)
    checkpoint_id: Mapped[int] = mapped_column(BigInteger)
    partition: Mapped[str] = mapped_column(String(255))
    offset: Mapped[int] = mapped_column(BigInteger)


class IdFilter(Base):
    """One event-time window's Bloom filter (bit array), in front of ``record_ids``."""

    __tablename__ = "id_filters"
    __table_args__ = (ForeignKeyConstraint(["job"], ["jobs.name"]),)

    job: Mapped[str] = mapped_column(String(64), primary_key=True)
    window_start: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    bits: Mapped[bytes] = mapped_column(LargeBinary)
    items: Mapped[int] = mapped_column(BigInteger, default=0)


class IdWatermark(Base):
    """A job's event-time watermark: windows below it are garbage-collected, later records there are late."""

    __tablename__ = "id_watermarks"
    __table_args__ = (ForeignKeyConstraint(["job"], ["jobs.name"]),)

    job: Mapped[str] = mapped_column(String(64), primary_key=True)
    watermark: Mapped[int] = mapped_column(BigInteger)
    max_event_time: Mapped[int] = mapped_column(BigInteger)


class BackEdgeLog(Base):
    """Back-edge log n of one loop-tail subtask: records in flight on the back-edge at barrier n."""

    __tablename__ = "back_edge_logs"
    __table_args__ = (
        ForeignKeyConstraint(["job", "checkpoint_id"], ["checkpoints.job", "checkpoints.checkpoint_id"]),
    )

    job: Mapped[str] = mapped_column(String(64), primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    operator: Mapped[str] = mapped_column(String(64), primary_key=True)
    subtask: Mapped[int] = mapped_column(Integer, primary_key=True)
    uri: Mapped[str | None] = mapped_column(Text)
    records: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    checksum: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
