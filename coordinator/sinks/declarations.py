"""What a job declares a sink to be: the kind of target and where it is.

A declaration holds no connection and no schema; ``target(schema, key, catalog_url)`` makes the
``SinkTarget`` for the columns the job sends it (``coordinator.sinks.base``). Where a target is may
name environment variables, read when the target is made: ``${NAME}`` or ``${NAME:-default}``
(defaults may hold variables too; ``coordinator.sinks.locations.expand``), so one job file serves every
environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from coordinator.keywords import checked_keywords
from coordinator.sinks.base import SinkTarget
from coordinator.sinks.locations import expand, sql_table_uri, storage_uri


@checked_keywords()
@dataclass(frozen=True)
class SqlTable:
    """A table in the catalog database (``url`` None) or in any SQLAlchemy database the job names,
    created by the sink from the declared columns (plus ``checkpoint_id``, the checkpoint that last
    wrote the row) when missing. In the catalog database the rows, the transaction's status and
    the high-water marks change in one transaction; in another database a commit record
    (``absreplay_sink_commits``) changes with the rows, in one transaction there."""

    table: str
    url: str | None = None

    def target(self, schema: pa.Schema, key: tuple[str, ...] | None, catalog_url: str) -> SinkTarget:
        from coordinator.sinks.sql_table import SqlTableTarget

        return SqlTableTarget(self.table, schema, key, expand(self.url) if self.url else None, catalog_url)

    def location(self, catalog_url: str) -> str:
        """Where the rows are (``coordinator.sinks.locations``): the database and the table, no password."""
        return sql_table_uri((expand(self.url) if self.url else None) or catalog_url, self.table)


@checked_keywords()
@dataclass(frozen=True)
class ParquetDirectory:
    """A directory of Parquet files, one subdirectory per committed checkpoint, renamed into place
    whole: readers see whole checkpoints only."""

    path: str

    def target(self, schema: pa.Schema, key: tuple[str, ...] | None, catalog_url: str) -> SinkTarget:
        from coordinator.sinks.parquet_dir import ParquetDirectory as Target

        return Target(expand(self.path), schema, key)

    def location(self, catalog_url: str) -> str:  # catalog_url: one signature for every declaration
        """Where the files are: ``file:///ABSOLUTE/PATH`` (``coordinator.sinks.locations``)."""
        return storage_uri(expand(self.path))


@checked_keywords()
@dataclass(frozen=True)
class DeltaTable:
    """A Delta Lake table (the ``deltalake`` package): each checkpoint is one Delta commit carrying
    the checkpoint id as its application transaction version, so Delta itself skips a replayed one."""

    uri: str
    storage_options: dict[str, str] = field(default_factory=dict)

    def target(self, schema: pa.Schema, key: tuple[str, ...] | None, catalog_url: str) -> SinkTarget:
        from coordinator.sinks.delta_table import DeltaTable as Target

        return Target(expand(self.uri), schema, key, dict(self.storage_options) or None)

    def location(self, catalog_url: str) -> str:  # catalog_url: one signature for every declaration
        """Where the table is, without credentials (``coordinator.sinks.locations``)."""
        return storage_uri(expand(self.uri))


@checked_keywords()
@dataclass(frozen=True)
class KafkaTopic:
    """A Kafka topic: each checkpoint's output published in one Kafka transaction with its commit record
    (a marker in ``commits_topic``), exactly once for a read_committed consumer
    (``coordinator.sinks.kafka_topic``). ``bootstrap_servers`` and ``options`` (client settings) may name
    ``${VAR}``; the options are never shown."""

    topic: str
    bootstrap_servers: str
    options: dict[str, str] = field(default_factory=dict, repr=False)
    commits_topic: str = "absreplay-commits"

    def __post_init__(self) -> None:
        import re

        for what, name in (("topic", self.topic), ("commits_topic", self.commits_topic)):
            if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", name or ""):
                raise ValueError(f"Kafka sink: {what} {name!r} is not a topic name (letters, digits, '.', '_', '-')")
        if not self.bootstrap_servers:
            raise ValueError("a Kafka sink needs bootstrap_servers ('host:port,...'; it may name ${VAR})")
        if own := [k for k in self.options if k.startswith("transactional.") or k in ("bootstrap.servers",)]:
            raise ValueError(f"Kafka sink: options {', '.join(own)} are the sink's own (its transactional id is "
                             f"absreplay-<job>-<sink>)")

    def target(self, schema: pa.Schema, key: tuple[str, ...] | None, catalog_url: str) -> SinkTarget:
        from coordinator.sinks.kafka_topic import KafkaTopic as Target

        return Target(self.topic, self.bootstrap_servers, tuple(sorted(self.options.items())), schema, key,
                      self.commits_topic)

    def location(self, catalog_url: str) -> str:  # catalog_url: one signature for every declaration
        """``kafka://HOST:PORT/TOPIC`` (the first bootstrap server), as OpenLineage names a topic."""
        return f"kafka://{expand(self.bootstrap_servers, 'Kafka bootstrap_servers').split(',')[0].strip()}/{self.topic}"


SinkDeclaration = SqlTable | ParquetDirectory | DeltaTable | KafkaTopic
