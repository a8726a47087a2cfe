"""A Delta table as a sink target, through ``deltalake`` (delta-rs), idempotent by Delta's
application transactions.

Every write of this target is one Delta commit carrying the application transaction
(``app_id`` ``absreplay:<job>:<sink>``, ``version`` the checkpoint id): the commit record lives in
the table's own log with the data, so ``committed_through`` is ``transaction_version(app_id)`` as any
process reads it. Delta records the transaction but does not refuse a version at or below the recorded
one by itself (the protocol leaves that to the writer): ``commit`` reads the version first and writes
nothing for a checkpoint at or below it. A writer of the same app id that commits between that read and
this commit makes this one fail (delta-rs' conflict check: ``CommitFailedError``, concurrent
transaction) instead of writing twice; the caller retries, and the retry finds the checkpoint committed.

- keyed sink: one MERGE per checkpoint on the key (matched: update every column, not matched: insert;
  a tombstone, ``coordinator.sinks.deletes``: matched, delete); a checkpoint with no rows, or whose MERGE
  changes nothing, is an empty append, since a MERGE of nothing makes no commit to record;
- append sink: ``write_deltalake(mode="append")``; each row carries ``abs_checkpoint_id``, the
  checkpoint that appended it: a column of the Delta table that ``read`` leaves out, and what a revert
  removes by;
- revert: one commit that both puts the content back and sets the transaction to the checkpoint (for
  an app id the newest SetTransaction counts, whatever its version; RESTORE would leave the newer one
  in place): keyed, an overwrite with ``rows``; append, an overwrite with nothing of the rows whose
  ``abs_checkpoint_id`` is a checkpoint of an epoch after N's, whatever its id (an append revert that
  finds no such row, and whose record is no such checkpoint, changes nothing).
  A later checkpoint then commits again.

A table holds one sink's output. I/O errors come out as ``OSError`` or ``deltalake``'s ``DeltaError``
for the caller to translate; ``deltalake`` is imported when a method runs.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from coordinator.errors import SinkSchemaError
from coordinator.sinks import deletes
from coordinator.sinks.base import schema_difference
from coordinator.sinks.deletes import DELETE
from coordinator.storage import filesystems

if TYPE_CHECKING:
    import deltalake

#: the internal column of an append sink's table: the checkpoint that appended the row
CHECKPOINT_COLUMN = "abs_checkpoint_id"


def app_id(job: str, sink: str) -> str:
    """The Delta application id under which (job, sink) records its committed checkpoint."""
    return f"absreplay:{job}:{sink}"


def _commit_properties(job: str, sink: str, checkpoint_id: int) -> Any:
    from deltalake import CommitProperties, Transaction

    return CommitProperties(app_transactions=[Transaction(app_id=app_id(job, sink), version=checkpoint_id)])


def _delta_types(schema: Any) -> dict[str, str]:
    """Column -> Delta type of a Delta schema (so string and large_string, say, agree)."""
    return {f.name: repr(f.type) for f in schema.fields}


class DeltaTable:
    def __init__(self, uri: str, schema: pa.Schema, key: tuple[str, ...] | None,
                 storage_options: dict[str, str] | None = None) -> None:
        self.uri = uri
        self.schema = schema
        self.key = key
        # on S3, what the job declares over what the S3A properties say (the endpoint Spark and the coordinator use)
        derived = filesystems.delta_storage_options(uri)
        self.storage_options = {**derived, **(storage_options or {})} if derived else storage_options

    def describe(self) -> str:
        return f"Delta table {self.uri}"

    @property
    def table_schema(self) -> pa.Schema:
        """The Delta table's columns: the sink's, and for an append sink the checkpoint column."""
        if self.key is None:
            return self.schema.append(pa.field(CHECKPOINT_COLUMN, pa.int64()))
        return self.schema

    def prepare(self) -> None:
        from deltalake import DeltaTable as Table
        from deltalake import Schema

        if CHECKPOINT_COLUMN in self.schema.names:
            raise SinkSchemaError(f"{self.describe()}: the sink declares column {CHECKPOINT_COLUMN}, which the "
                                  f"target keeps for itself: rename the column")
        declared = Schema.from_arrow(self.table_schema)
        # "ignore": a table that exists (made by another process meanwhile, too) is left as it is
        Table.create(self.uri, declared, mode="ignore", storage_options=self.storage_options)
        found = self._open().schema()
        if diff := schema_difference(_delta_types(declared), _delta_types(found)):
            raise SinkSchemaError(f"{self.describe()} has other columns than the sink declares ({diff}); nothing "
                                  f"was written: rename the table or make the declaration match it")

    def committed_through(self, job: str, sink: str) -> int | None:
        from deltalake import DeltaTable as Table

        if not Table.is_deltatable(self.uri, self.storage_options):
            return None
        return self._open().transaction_version(app_id(job, sink))

    def commit(self, job: str, sink: str, checkpoint_id: int, rows: pa.Table) -> bool:
        from deltalake import write_deltalake

        # one snapshot for the check and the write: a commit of the same app id in between conflicts
        table = self._open()
        done = table.transaction_version(app_id(job, sink))
        if done is not None and checkpoint_id <= done:
            return False
        props = _commit_properties(job, sink, checkpoint_id)
        data = self._conform(rows)
        if self.key is None:
            data = data.append_column(CHECKPOINT_COLUMN, pa.array([checkpoint_id] * data.num_rows, pa.int64()))
            write_deltalake(table, data, mode="append", commit_properties=props)
        elif data.num_rows == 0:
            write_deltalake(table, data, mode="append", commit_properties=props)
        elif deletes.has_deletes(rows):
            self._merge_with_deletes(table, rows, props)
        else:
            on = " AND ".join(f"target.`{k}` = source.`{k}`" for k in self.key)
            (table.merge(data, on, source_alias="source", target_alias="target", commit_properties=props)
             .when_matched_update_all().when_not_matched_insert_all().execute())
        return True

    def _merge_with_deletes(self, table: deltalake.DeltaTable, rows: pa.Table, props: Any) -> None:
        """One MERGE: a tombstone deletes its key's row, a live row updates or inserts it. A MERGE that
        changes nothing (tombstones of keys the table lacks) makes no commit: an empty append records the
        checkpoint then."""
        from deltalake import write_deltalake

        data = self._conform(rows).append_column(DELETE, deletes.tombstones(rows))
        on = " AND ".join(f"target.`{k}` = source.`{k}`" for k in self.key)
        columns = {c: f"source.`{c}`" for c in self.schema.names}
        metrics = (table.merge(data, on, source_alias="source", target_alias="target", commit_properties=props)
                   .when_matched_delete(predicate=f"source.`{DELETE}`")
                   .when_matched_update(updates=columns, predicate=f"NOT source.`{DELETE}`")
                   .when_not_matched_insert(updates=columns, predicate=f"NOT source.`{DELETE}`").execute())
        if not any(metrics.get(m) for m in ("num_target_rows_inserted", "num_target_rows_updated",
                                            "num_target_rows_deleted", "num_target_files_added",
                                            "num_target_files_removed")):
            write_deltalake(self._open(), self.schema.empty_table(), mode="append", commit_properties=props)

    def revert(self, job: str, sink: str, checkpoint_id: int, rows: pa.Table, later: Collection[int]) -> int:
        from deltalake import write_deltalake

        table = self._open()
        props = _commit_properties(job, sink, checkpoint_id)
        if self.key is None:
            done = table.transaction_version(app_id(job, sink))
            ids = sorted(int(c) for c in later)
            # by epoch, not by id: a checkpoint below ``checkpoint_id`` may hold a later epoch's rows
            removed = table.to_pyarrow_dataset().count_rows(filter=pc.field(CHECKPOINT_COLUMN).isin(ids)) if ids else 0
            if done is None or (not removed and done not in later):  # nothing to remove; the record never moves up
                return 0
            # an overwrite by predicate commits even when nothing matches (a DELETE of nothing does not),
            # so the transaction goes back to the checkpoint either way
            write_deltalake(table, self.table_schema.empty_table(), mode="overwrite",
                            predicate=f"`{CHECKPOINT_COLUMN}` IN ({', '.join(map(str, ids))})",
                            commit_properties=props)
            return removed
        write_deltalake(table, self._conform(rows), mode="overwrite", commit_properties=props)
        return rows.num_rows

    def read(self) -> pa.Table:
        return self._open().to_pyarrow_table(columns=self.schema.names).select(self.schema.names).cast(self.schema)

    def _open(self) -> deltalake.DeltaTable:
        from deltalake import DeltaTable as Table

        return Table(self.uri, storage_options=self.storage_options)

    def _conform(self, rows: pa.Table) -> pa.Table:
        return rows.select(self.schema.names).cast(self.schema)
