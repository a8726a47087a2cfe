"""Deletes in an upsert stream: tombstones, as sinks and state readers see them. No Spark here.

A keyed operator that can delete keys (a process function returning rows with ``_delete`` true, an
operator with a state TTL) keeps the column ``DELETE`` in its state: null on a live row, true on a
tombstone, the row that says "this key left the state at checkpoint ``updated``". A tombstone holds
the key; its values are null. It travels where a changed row travels: into the incremental snapshot
(a restore's newest row per key is then the tombstone, and the key is dropped), into the staged
output of the operator's upsert sinks (the sink deletes the key's row in the commit of that
checkpoint), and into the operator's emitted stream.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

#: the state column marking a tombstone (true) or a live row (null)
DELETE = "_delete"


def has_deletes(rows: pa.Table) -> bool:
    return DELETE in rows.column_names


def tombstones(rows: pa.Table) -> pa.Array:
    """Per row, whether it is a tombstone (a null marker is a live row)."""
    if DELETE not in rows.column_names:
        return pa.array([False] * rows.num_rows, pa.bool_())
    return pc.fill_null(rows.column(DELETE), False).combine_chunks()


def split(rows: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(live rows, tombstones), both without the marker column."""
    if DELETE not in rows.column_names:
        return rows, rows.slice(0, 0)
    dead = tombstones(rows)
    rest = [c for c in rows.column_names if c != DELETE]
    return rows.filter(pc.invert(dead)).select(rest), rows.filter(dead).select(rest)


def live(rows: pa.Table) -> pa.Table:
    """The live rows of a state (newest row per key already chosen), without the marker column."""
    return split(rows)[0]
