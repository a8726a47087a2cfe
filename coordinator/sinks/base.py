"""What a sink target is to the checkpoint lifecycle.

A target receives the output of one checkpoint at a time, in checkpoint order,
as an Arrow table: for a keyed sink (``key`` set) the rows upsert the keyed
result (one row per key, the key's value as of that checkpoint); for an
append sink (``key`` None) they are appended. ``commit`` is idempotent by
checkpoint id through a commit record the target keeps itself (the SQL
table's commit row in the same transaction, Delta's application
transaction, the Parquet directory's committed checkpoint directories), so a
commit retried after a crash between the target's write and the catalog's
status change writes nothing twice. Replays after a recovery carry new
checkpoint ids; the catalog's high-water marks keep those out
(``transactions.commit``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol, runtime_checkable

import pyarrow as pa


@runtime_checkable
class SinkTarget(Protocol):
    #: the output's columns and types, the key first for a keyed sink
    schema: pa.Schema
    #: the upsert key's columns, one or several (None: an append-only sink)
    key: tuple[str, ...] | None

    def describe(self) -> str:
        """One line naming the target (kind and where), for errors, logs and the audit."""
        ...

    def prepare(self) -> None:
        """Create the target from ``schema`` when it is missing (idempotent); a target that exists
        with other columns or types raises ``SinkSchemaError`` naming the difference."""
        ...

    def committed_through(self, job: str, sink: str) -> int | None:
        """The newest checkpoint id the target itself records as committed for (job, sink)."""
        ...

    def commit(self, job: str, sink: str, checkpoint_id: int, rows: pa.Table) -> bool:
        """Apply one checkpoint's output atomically (readers see all of it or none of it) and record
        ``checkpoint_id`` as committed with it. False, writing nothing: it was committed already."""
        ...

    def revert(self, job: str, sink: str, checkpoint_id: int, rows: pa.Table, later: Collection[int]) -> int:
        """Put the target back to exactly checkpoint ``checkpoint_id`` (a rewind): a keyed target then
        holds exactly ``rows``; an append target drops what the checkpoints ``later`` appended, those
        whose epochs come after ``checkpoint_id``'s (after a recovery ids no longer follow the epochs:
        a replay's id is above those of the later epochs' checkpoints whose rows stay in the target).
        The commit record goes back to ``checkpoint_id``. Returns the rows written or removed."""
        ...

    def read(self) -> pa.Table:
        """What readers see now: one row per key for a keyed target, every row for an append one."""
        ...


def schema_difference(declared: Mapping[str, str], found: Mapping[str, str]) -> str | None:
    """What differs between the columns a sink declares and the ones its target has (name -> type,
    in the target's own type names; column order does not matter), or None when they agree."""
    parts = []
    if missing := [c for c in declared if c not in found]:
        parts.append(f"missing column(s) {', '.join(missing)}")
    if extra := [c for c in found if c not in declared]:
        parts.append(f"extra column(s) {', '.join(extra)}")
    if changed := [f"{c} is {found[c]}, declared {declared[c]}" for c in declared
                   if c in found and found[c] != declared[c]]:
        parts.append("; ".join(changed))
    return "; ".join(parts) or None
