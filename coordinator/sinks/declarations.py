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


SinkDeclaration = SqlTable | ParquetDirectory | DeltaTable
