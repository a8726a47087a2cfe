"""An operator's keyed state at any retained checkpoint, read straight from its snapshot files
with pyarrow: no Spark, no JVM, so "what did key K look like at checkpoint 812" takes a second.

The files are the chain ``coordinator.checkpoints.state_chain`` names (every subtask that acked the
checkpoint, each back to its full snapshot); per key the row with the newest ``updated``
wins, exactly as a restore does. Read whole (no key asked for), each file set's row count
is checked against its ack; restores additionally check the content checksums (Spark's
xxhash64, which only Spark computes: ``spark_jobs.state_frame`` returns the same state as a
verified Spark DataFrame).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from coordinator.checkpoints.state_files import newest_per_key
from coordinator.checkpoints import state_chain, state_files
from coordinator.checkpoints.lifecycle import CheckpointStatus
from coordinator.checkpoints.store import CheckpointStore
from coordinator.dataflow.jobs import JobDefinition
from coordinator.errors import StateIntegrityError, UsageError
from coordinator.sinks import deletes

UPDATED = "updated"
#: the checkpoint of the chain link a row was read from (the newest link's version of a row wins)
LINK = "__link_checkpoint"


@dataclass(frozen=True)
class StateDiff:
    key: str
    added: pa.Table
    removed: pa.Table
    #: the key, then each value column before (``<col>_from``) and after (``<col>_to``)
    changed: pa.Table


def key_of(job: JobDefinition, operator: str | None = None) -> str:
    """The key column of an operator's state (its first, for a key of several columns)."""
    return job.state(check_operator(job, operator)).key[0]


def check_operator(job: JobDefinition, operator: str | None) -> str:
    """The operator asked for (default: the job's first stateful operator); UsageError for one without state."""
    stateful = [st.operator for st in job.states]
    if operator is None:
        return stateful[0]
    if operator in stateful:
        return operator
    known = [op.name for op in job.graph.operators]
    if operator not in known:
        raise UsageError(f"job {job.name!r} has no operator {operator!r}; its operators: {', '.join(known)}")
    raise UsageError(f"operator {operator!r} of job {job.name!r} keeps no keyed state; those that do: "
                     f"{', '.join(stateful)}")


def check_retained(store: CheckpointStore, job: str, checkpoint_id: int) -> None:
    """UsageError (exit 2) unless the checkpoint is a retained (COMPLETED) one: the state files of
    others are garbage-collected (subsumed, superseded) or were never whole (pending, failed)."""
    ck = store.checkpoint(job, checkpoint_id)  # CheckpointNotFoundError (exit 2)
    if ck.status != CheckpointStatus.COMPLETED:
        retained = [c.checkpoint_id for c in store.checkpoints(job) if c.status == CheckpointStatus.COMPLETED]
        raise UsageError(f"checkpoint {checkpoint_id} of job {job!r} is {ck.status}: only retained (completed) "
                         f"checkpoints keep their state files; retained: {retained or 'none'}")


def state_at(store: CheckpointStore, job: JobDefinition, checkpoint_id: int, operator: str | None = None,
             key: str | None = None) -> pa.Table:
    """The operator's state at ``checkpoint_id`` (every column, ``updated`` = the checkpoint whose
    epoch last changed the row), sorted by key; ``key``: only that key's row (or none)."""
    op = check_operator(job, operator)
    check_retained(store, job.name, checkpoint_id)
    links, _ = state_chain.chain(store, job.name, op, state_chain.acked_subtasks(store, job.name, op, checkpoint_id))
    key_column = key_of(job, op)
    parts = []
    for link in links:
        if link.rows == 0:
            continue
        table = _read_link(link, key_column, key)
        if key is None and table.num_rows != link.rows:
            raise StateIntegrityError(f"state file {link.uri} of checkpoint {link.checkpoint_id} holds "
                                      f"{table.num_rows} rows, its ack says {link.rows}")
        parts.append(table.append_column(LINK, pa.array([link.checkpoint_id] * table.num_rows, pa.int64())))
    if not parts:
        return pa.table({key_column: pa.array([], pa.null())})
    rows = pa.concat_tables(parts, promote_options="default")
    identity = job.state(op).identity
    if not job.state(op).incremental:  # every snapshot is full: one version of each row
        return rows.drop_columns([LINK]).sort_by([(c, "ascending") for c in identity if c in rows.column_names])
    # per row, the version of the newest link; a row whose newest version is a tombstone left the state
    return deletes.live(newest_per_key(rows, identity, LINK).drop_columns([LINK]))


def _read_link(link: state_chain.ChainLink, key_column: str, key: str | None) -> pa.Table:
    import pyarrow.dataset as ds  # here: it imports pandas, which the command line's start need not pay for

    fs, path = state_files.filesystem(link.uri)
    try:
        dataset = ds.dataset(path, filesystem=fs, format="parquet")
        if key is None:
            return dataset.to_table()
        value = _typed(key, dataset.schema.field(key_column).type)
        return dataset.to_table(filter=pc.field(key_column) == value)
    except (OSError, pa.ArrowException) as exc:
        raise StateIntegrityError(f"state file {link.uri} of checkpoint {link.checkpoint_id} is missing or "
                                  f"unreadable: {str(exc).splitlines()[0]}") from None


def _typed(key: str, arrow_type: pa.DataType) -> object:
    if pa.types.is_integer(arrow_type):
        try:
            return int(key)
        except ValueError:
            raise UsageError(f"--key {key!r}: this job's keys are integers") from None
    return key


def diff(store: CheckpointStore, job: JobDefinition, from_id: int, to_id: int, operator: str | None = None) -> StateDiff:
    """Rows added, removed and changed (any value column) between two checkpoints' states, a row being
    a key, or what identifies a row of a state keyed by several columns (a window's key and start)."""
    before, after = (state_at(store, job, c, operator) for c in (from_id, to_id))
    identity = list(job.state(check_operator(job, operator)).identity)
    key = identity[0]
    if before.num_rows == 0:
        before = after.schema.empty_table()
    if after.num_rows == 0:
        after = before.schema.empty_table()
    if len(identity) > 1:  # one comparable column stands for the identity, both sides sorted by it
        before, after = (_with_identity(t, identity) for t in (before, after))
        key = IDENTITY
    values = [c for c in after.column_names if c not in (key, UPDATED, *identity)]
    added = after.filter(pc.invert(pc.is_in(after.column(key), value_set=before.column(key))))
    removed = before.filter(pc.invert(pc.is_in(before.column(key), value_set=after.column(key))))
    # the keys in both, in the same (key) order on each side: compare row by row
    old = before.filter(pc.is_in(before.column(key), value_set=after.column(key)))
    new = after.filter(pc.is_in(after.column(key), value_set=before.column(key)))
    differs = [False] * old.num_rows
    for c in values:
        a, b = old.column(c), new.column(c)
        if pa.types.is_nested(a.type):  # lists (e.g. neighbours): compared as Python values
            ne = [x != y for x, y in zip(a.to_pylist(), b.to_pylist(), strict=True)]
        else:
            ne = pc.fill_null(pc.not_equal(a, b), True).to_pylist()
        differs = [d or n for d, n in zip(differs, ne, strict=True)]
    mask = pa.array(differs, pa.bool_())
    columns = {c: old.column(c).filter(mask) for c in identity}
    for c in values:
        columns[f"{c}_from"], columns[f"{c}_to"] = old.column(c).filter(mask), new.column(c).filter(mask)
    if key == IDENTITY:
        added, removed = added.drop_columns([IDENTITY]), removed.drop_columns([IDENTITY])
    return StateDiff(", ".join(identity), added, removed, pa.table(columns))


IDENTITY = "_identity"


def _with_identity(rows: pa.Table, identity: list[str]) -> pa.Table:
    parts = [pc.cast(rows.column(c), pa.string()) for c in identity]
    joined = pc.binary_join_element_wise(*parts, "\x1f") if rows.num_rows else pa.array([], pa.string())
    return rows.append_column(IDENTITY, joined).sort_by(IDENTITY)
