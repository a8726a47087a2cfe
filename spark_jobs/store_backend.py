"""Keyed aggregates on local stores: an epoch reads and writes the keys it touches, not the state.

With the ``spark`` backend (``spark_jobs.keyed_operators.aggregate``) a keyed
aggregate's state is one DataFrame that every epoch unions with its records and
aggregates again: the cost of an epoch grows with the state. With the ``local``
backend (the default; ``ABS_STATE_BACKEND``) each subtask's state lives in a
SQLite store beside the tasks (``spark_jobs.local_store``), and an epoch is

1. the records' contributions, aggregated per (subtask, key) in Spark (partial
   aggregation before the shuffle), then routed to their store's partition;
2. one task per store that folds them into the touched keys' rows in SQLite
   and returns those rows: the epoch's changelog, which is what the operator
   emits, what an incremental snapshot holds and what an upsert sink commits.
   For a local state root the same task writes it as the subtask's delta file
   of checkpoint n (Flink's changelog backend persists state changes as it
   goes, likewise), its rows and checksum observed in that pass; the
   asynchronous phase then only seals and acks it.

A catch-up runs its pending epochs together (``Dataflow.epochs``): one Spark job
aggregates the records per key, each epoch's contributions merged in a column of
their own (``_per_key``: a catch-up's keys recur from epoch to epoch, so the
aggregation holds one row per key, not one per key and epoch), and each store's
task unpivots its keys' rows per epoch, folds them in epoch order in one
transaction and writes each epoch's delta, so the epochs cost one job, not one
each. Where the records reach the aggregate row by
row from a scan of plain lines, that job scans all the epochs' files at once and
tells a record's epoch by its file (``epoch_source.epoch_of_file``). The rows
each task returns are only counted and checksummed (``keyed_state.metrics_by``):
an epoch's changes, for whatever reads them, are its delta files.

A full snapshot reads the stores as of the checkpoint (multi-version, so the
next epoch may already be applied), in Spark tasks: nothing is collected to the
driver. For a local state root those tasks write the snapshot's files
themselves, as they write the deltas (``write_full``). A run starts from the
stores as they are when they hold the checkpoint it restores (or can roll back
to it); otherwise it loads them from the checkpoint's snapshot files, read and
checked as before. The snapshots stay the durable truth: a lost store directory
costs a reload, never data.

Which aggregates: count, sum, min, max and mean over integer, floating, string and
boolean columns. A ``combine`` aggregate, a process function, a window, a join
and a loop keep the DataFrame state. ``verify`` always recomputes with the
DataFrame operators, so it checks the stores against an independent path.

Stores live under ``ABS_STORE_DIR`` or, for a local state root, under
``<state root>/<job>/_stores``: every executor must see that directory (one
host, or a shared mount).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import cache, partial
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, StructField, StructType

from coordinator.checkpoints import state_files
from coordinator.dataflow.jobs import JobDefinition, StateSpec
from coordinator.settings import Settings
from spark_jobs import keyed_operators as ko, store_tasks
from spark_jobs.keyed_state import SUBTASK, metrics_by, snapshot_metrics, with_subtask
from spark_jobs.local_store import FORMAT, SUPPORTED, Layout, StoreVersionError, SubtaskStore
from spark_jobs.spark_types import spark_schema, spark_type

BACKEND_ENV = "ABS_STATE_BACKEND"
#: how each built-in aggregate's state columns merge (``keyed_operators._parts``)
MERGES = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}
#: the column that tells ``aggregate`` a record's epoch (``tagged``)
EPOCH = "_abs_epoch"
#: ``_per_key``'s columns: a record's epoch as its position in the group (0: none of it), the epochs a key had
SLOT, PRESENT = "_abs_slot", "_abs_present"


def store_root(state_uri: str, job: str) -> Path:
    configured = Settings.from_env().store_dir
    if configured:
        return Path(configured).expanduser().resolve() / job
    root = state_files.normalize_root(state_uri)
    if "://" in root:
        return Path(tempfile.gettempdir()) / "absreplay-stores" / job
    return Path(root) / job / "_stores"


def layout_of(node: object, spec: StateSpec) -> Layout | None:
    """The store layout of a keyed aggregate, or None when it keeps the DataFrame state."""
    if getattr(node, "kind", None) != "aggregate" or spec.columns is None:
        return None
    merges, means = [], []
    for name, agg in node.aggregates.items():
        if agg.kind == "mean":
            s, n = ko.hidden(name, "sum"), ko.hidden(name, "count")
            merges += [(s, "sum"), (n, "sum"), (name, "first")]
            means.append((name, s, n))
        elif agg.kind in MERGES:
            merges.append((name, MERGES[agg.kind]))
        else:
            return None
    schema = to_arrow_schema(spark_schema(spec.columns))
    if any(field.type not in SUPPORTED for field in schema):
        return None
    return Layout(schema, tuple(node.key_names), tuple(merges), tuple(means))


@dataclass(frozen=True)
class StoreState:
    """A keyed aggregate's state at ``version``: its stores, and the epoch's changed rows."""

    operator: str
    directory: str
    layout: Layout
    schema: StructType
    parallelism: int
    max_parallelism: int
    version: int
    #: the job's snapshot folder when the state root is local (the epoch's tasks write its delta there)
    snapshots: str | None = None
    #: the version the epoch started from, and what plans the rows it changed (None: restored, no epoch yet)
    prev: int | None = None
    changes_of: Callable[[], DataFrame] | None = None
    #: the delta the epoch's tasks wrote to chk-<version>/<operator>/: rows and checksum per subtask,
    #: observed as they were written (None: not written; the snapshot writer writes it)
    written: dict | None = None

    @property
    def columns(self) -> list[str]:
        return self.schema.fieldNames()

    @property
    def changes(self) -> DataFrame | None:
        """The rows the epoch changed, planned when first asked for (often nothing reads them)."""
        return None if self.changes_of is None else self.changes_of()

    def checkpoint_dir(self, checkpoint_id: int) -> str:
        """The operator's folder of checkpoint ``checkpoint_id`` under ``snapshots`` (a local state root)."""
        return f"{self.snapshots}/chk-{checkpoint_id}/{self.operator}"

    def subtask_dir(self, i: int) -> str:
        return f"{self.directory}/subtask-{i}"

    def rows(self, spark: SparkSession, since: int | None = None) -> DataFrame:
        """The state as of ``version`` (``since``: the rows changed after that version), read by one
        Spark task per store."""
        if (since or 0) == self.prev and self.changes is not None:  # version 0: the stores were empty
            return self.changes
        one_per_store = spark.range(0, self.parallelism, 1, self.parallelism)  # partition i: store i
        return one_per_store.mapInArrow(store_tasks.read_task(self.directory, self.layout, self.version, since),
                              self.schema)


def write_full(spark: SparkSession, state: StoreState, base: int | None) -> dict:
    """The full snapshot of the stores as of ``state.version``, for a local state root: one task per store
    writes its subtask's file, as the deltas are written (none of Spark's file commit protocol). Returns the
    rows and checksum of each subtask and the rows changed after ``base``, as the snapshot writer observes them
    (``keyed_state.snapshot_metrics``)."""
    folder = state.checkpoint_dir(state.version)
    shutil.rmtree(folder, ignore_errors=True)  # the epoch's delta, an earlier attempt's files
    dump = store_tasks.dump_task(state.directory, state.layout, state.version, folder, SUBTASK)
    rows = spark.range(0, state.parallelism, 1, state.parallelism).mapInArrow(
        dump, StructType([*state.schema.fields, StructField(SUBTASK, IntegerType(), False)]))
    observation = Observation(f"full-{state.version}-{state.operator}")
    rows.observe(observation, *snapshot_metrics(state.columns, state.parallelism, base)).write.format("noop").mode(
        "overwrite").save()
    return observation.get


def own_snapshot(spark: SparkSession, state: StoreState, full: bool, base: int | None) -> dict | None:
    """The metrics (``keyed_state.snapshot_metrics``) of the snapshot files of checkpoint ``state.version``
    when the stores' tasks write them: the delta the epoch's tasks wrote, incremental on ``base`` (on the job's
    first snapshot the stores started empty, so that delta is the whole state), or, full, what they write now
    for a local state root (``write_full``). None: the snapshot writer writes them from ``StoreState.rows``."""
    if state.written is not None and state.prev == (base or 0) and (not full or base is None):
        metrics = dict(state.written["metrics"])
        metrics["changed"] = sum(metrics.get(f"rows_{i}") or 0 for i in range(state.parallelism))
        return metrics
    if full and state.snapshots is not None:
        return write_full(spark, state, base)
    return None


def _delta_rows(spark: SparkSession, state: StoreState, delta: str, subtasks: list[int]) -> DataFrame:
    """An epoch's changes as its apply wrote them: the delta files of ``subtasks`` (those with rows)."""
    if not subtasks:
        return spark.createDataFrame([], state.schema)
    return spark.read.schema(state.schema).parquet(*[f"{delta}/{SUBTASK}={i}" for i in subtasks])


def _by_store(rows: DataFrame, parallelism: int) -> DataFrame:
    """``rows`` (with a subtask column) partitioned so that Spark partition i holds subtask i's rows alone:
    one task per store, run for every store (rows or not), and an aggregation grouping by the subtask
    column after it adds no shuffle."""
    return rows.repartitionById(parallelism, SUBTASK)


def tagged(rows: DataFrame, checkpoint_id: int) -> DataFrame:
    """The records of one epoch, tagged with it for ``aggregate``."""
    return rows.withColumn(EPOCH, F.lit(checkpoint_id).cast("long"))


def _per_key(rows: DataFrame, node: object, layout: Layout, ids: list[int]) -> tuple[DataFrame, list[str]]:
    """Each key's contributions of every epoch of ``ids`` merged in one row per key, not one per key and epoch:
    a catch-up's keys recur from epoch to epoch, so the aggregation holds, and the routing shuffle carries, one
    row per distinct key of the group rather than up to one per epoch. Column ``<state column>@<j>`` merges
    epoch ``ids[j]``'s contributions, and bit j + 1 of ``PRESENT`` says whether it had any; bit 0, whether the
    key had records of no epoch of ``ids`` (``store_tasks.per_epoch`` hands those to the store's apply, which
    fails). The merged state columns.

    The merges are SQL text, parsed once each: built from Column objects they cost hundreds of py4j calls
    per catch-up, 0.1 s of planning."""
    slot = F.expr(f"CAST(coalesce(array_position(array({', '.join(f'{c}L' for c in ids)}), {EPOCH}), 0) AS INT)")
    contributions = [F.col(k).cast(spark_type(t)).alias(k) for k, t in node.key]
    contributions += [value.alias(column) for name, agg in node.aggregates.items()
                      for column, value, _ in ko._parts(name, agg)]
    parts = list(layout.merges)  # each state column's merge, by its SQL name (``layout_of``)
    merges = [f"bit_or(shiftleft(1L, {SLOT})) AS {PRESENT}"] + [
        f"{merge}(CASE WHEN {SLOT} = {j + 1} THEN {_q(column)} END) AS {_q(f'{column}@{j}')}"
        for j in range(len(ids)) for column, merge in parts]
    wide = rows.select(*contributions, slot.alias(SLOT)).groupBy(*node.key_names).agg(
        *[F.expr(m) for m in merges])
    return wide, [column for column, _ in parts]


def _q(name: str) -> str:
    """A column name quoted for SQL text."""
    return "`" + name.replace("`", "``") + "`"


def aggregate(spark: SparkSession, state: StoreState, ids: list[int], rows: DataFrame, node: object,
              subtasks: frozenset[int] | None = None) -> list[StoreState]:
    """The records of epochs ``ids`` (each tagged with its epoch in column ``EPOCH``) of a keyed aggregate on
    its stores, in order, in one Spark job: one epoch, or several at once (a catch-up, ``Dataflow.epochs``);
    its state after each. ``subtasks``: only these take records (a partial recovery: the others are past the
    epoch already)."""
    keys, p = list(node.key_names), state.parallelism
    # aggregated per key first (partial aggregation before its shuffle: the records shrink to their distinct
    # keys), then routed to their store's partition (a second, small shuffle). Routing the records first would
    # shuffle every record, with no partial aggregation before it.
    wide, merged = _per_key(rows, node, state.layout, ids)
    per_key = with_subtask(wide, keys, p, state.max_parallelism)
    if subtasks is not None:
        per_key = per_key.where(F.col(SUBTASK).isin(sorted(subtasks)))
    batch = _by_store(per_key, p)
    prevs = [state.version, *ids[:-1]]
    # the delta of checkpoint n is its rows: written by the same tasks (a partial recovery leaves it to
    # the snapshot writer, which keeps the files of the subtasks past the epoch)
    deltas = None if state.snapshots is None or subtasks is not None else \
        [state.checkpoint_dir(checkpoint_id) for checkpoint_id in ids]
    for delta in deltas or ():  # an earlier attempt's files (at another parallelism, say) are not this one's
        shutil.rmtree(delta, ignore_errors=True)

    # each store's task unpivots its keys' rows into one per key and epoch itself (``store_tasks.per_epoch``): in
    # Spark, that was 10 times the rows through Arrow to the Python worker (0.4 s of a catch-up's 0.6 s apply)
    apply = store_tasks.apply_task(state.directory, state.layout, SUBTASK, ids, state.version, deltas, merged, PRESENT)
    applied = batch.mapInArrow(apply, StructType([*state.schema.fields, StructField(SUBTASK, IntegerType(), False)]))
    if deltas is None:  # the snapshot writer writes the deltas from these rows
        out = applied.localCheckpoint(eager=True)
        return [replace(state, version=checkpoint_id, prev=prev, written=None, changes_of=cache(
            lambda c=checkpoint_id: (out if len(ids) == 1 else out.where(F.col("updated") == F.lit(c))).drop(SUBTASK)))
                for checkpoint_id, prev in zip(ids, prevs, strict=True)]
    # the apply runs inside the aggregation that counts and checksums its rows, and nothing keeps them: an
    # epoch's changes are the delta files it wrote
    found = metrics_by(applied, state.columns, ["updated", SUBTASK])
    states = []
    for k, (checkpoint_id, prev) in enumerate(zip(ids, prevs, strict=True)):
        mine = {}
        for i in range(p):
            mine[f"rows_{i}"], mine[f"xor_{i}"] = found.get((checkpoint_id, i), (0, None))
        changes = cache(partial(_delta_rows, spark, state, deltas[k], [i for i in range(p) if mine[f"rows_{i}"]]))
        written = {"uri": "file://" + deltas[k], "metrics": mine}
        states.append(replace(state, version=checkpoint_id, prev=prev, changes_of=changes, written=written))
    return states


class StoreBackend:
    """The stores of a run's keyed aggregates: reuse or load them at the restore point."""

    def __init__(self, spark: SparkSession, job: JobDefinition, nodes: dict, state_uri: str,
                 max_parallelism: int, incarnation: str) -> None:
        self.spark, self.job = spark, job
        p = job.parallelism
        self.states: dict[str, StoreState] = {}
        # checkpoint ids are a job's (never reused), so a version names one state of one incarnation of
        # the job (its catalog row), one layout and one parallelism
        root = self.root = store_root(state_uri, job.name) / incarnation
        local = state_files.normalize_root(state_uri)
        snapshots = None if "://" in local else f"{local}/{job.name}"
        for spec in job.states:
            layout = layout_of(nodes[spec.operator], spec)
            if layout is not None:
                shape = hashlib.sha256(repr((FORMAT, layout.schema.to_string(), layout.merges)).encode()).hexdigest()[:12]
                directory = root / spec.operator / f"p{p}-g{max_parallelism}-{shape}"
                self.states[spec.operator] = StoreState(spec.operator, str(directory), layout,
                                                        spark_schema(spec.columns), p, max_parallelism, 0,
                                                        snapshots)

    @classmethod
    def of(cls, spark: SparkSession, job: JobDefinition, nodes: dict, state_uri: str, max_parallelism: int,
           incarnation: str) -> StoreBackend | None:
        if Settings.from_env().state_backend != "local":
            return None
        return cls(spark, job, nodes, state_uri, max_parallelism, incarnation)

    @property
    def operators(self) -> set[str]:
        return set(self.states)

    def reachable(self, point: int | None | dict[str, int | None]) -> set[str]:
        """The operators whose every store holds checkpoint ``point`` or can roll back to it (``point``
        per operator: a weak-consistency job's heads)."""
        return {op for op, st in self.states.items() if all(
            self._reach(st, i, _at(point, op) or 0) for i in range(st.parallelism))}

    def _reach(self, state: StoreState, i: int, point: int) -> bool:
        store = SubtaskStore(state.subtask_dir(i), state.layout)
        try:
            with store:
                info = store.info()
                return info.floor <= point <= info.version
        except (StoreVersionError, sqlite3.Error):
            return False

    def open(self, points: int | None | dict[str, int | None], ready: set[str],
             restored: dict[str, DataFrame | None]) -> dict[str, StoreState]:
        """Every store at ``points`` (one checkpoint, or one per operator): rolled back when in ``ready``,
        else loaded from ``restored``."""
        out = {}
        for op, st in self.states.items():
            point = _at(points, op)
            if op in ready:
                for i in range(st.parallelism):
                    with SubtaskStore(st.subtask_dir(i), st.layout) as store:
                        if store.info().version != (point or 0):
                            store.rollback(point or 0)
            elif point:
                self._load(st, restored[op], point)
            else:  # the empty state of a start from the sources: no Spark job
                for i in range(st.parallelism):
                    SubtaskStore(st.subtask_dir(i), st.layout).load((), 0)
            out[op] = replace(st, version=point or 0)
        return out

    def remove_stale(self) -> list[str]:
        """Delete the stores of this job incarnation that no run opens again: those of another layout
        (another parallelism, key-group count or state shape) and of operators the job no longer keeps
        in stores. Called under the run's lease, once its own stores are open; the paths removed.

        A store is a cache of the snapshot files: a run that changes its parallelism back, or a rewind
        to a checkpoint an old store still held, loads its stores from the files again. Other
        incarnations' folders are left alone: with a remote state root the store root is shared by
        every catalog on the host, and another catalog's job of the same name may be running."""
        keep = {Path(st.directory) for st in self.states.values()}
        removed = []
        for operator in sorted(p for p in self.root.glob("*") if p.is_dir()):
            for layout in sorted(p for p in operator.glob("*") if p.is_dir()):
                if layout not in keep:
                    shutil.rmtree(layout)
                    removed.append(str(layout))
            if not any(operator.iterdir()):
                operator.rmdir()
        return removed

    def _load(self, state: StoreState, rows: DataFrame, version: int) -> None:
        keys, directory, layout = list(state.layout.keys), state.directory, state.layout
        data = with_subtask(rows.select(*state.columns), keys, state.parallelism, state.max_parallelism)
        # sorted: SQLite's B-tree fills in key order
        load = store_tasks.load_task(directory, layout, SUBTASK, version)
        loaded = (_by_store(data, state.parallelism).sortWithinPartitions(*keys)
                  .mapInArrow(load, f"{SUBTASK} int, rows long").collect())
        if sorted(r[SUBTASK] for r in loaded) != list(range(state.parallelism)):
            raise StoreVersionError(f"loading the stores of {state.operator} in {directory}: subtasks "
                                    f"{sorted(r[SUBTASK] for r in loaded)} loaded, expected 0..{state.parallelism - 1}")


def _at(point: int | None | dict[str, int | None], operator: str) -> int | None:
    return point.get(operator) if isinstance(point, dict) else point
