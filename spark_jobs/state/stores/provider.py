"""Keyed aggregates on local stores: an epoch reads and writes the keys it touches, not the state.

With the ``spark`` backend (``spark_jobs.operators.keyed_operators.aggregate``) a keyed
aggregate's state is one DataFrame that every epoch unions with its records and
aggregates again: the cost of an epoch grows with the state. With the ``local``
backend (the default; ``ABS_STATE_BACKEND``) each subtask's state lives in a
SQLite store beside the tasks (``spark_jobs.state.stores.store``), and an epoch is

1. the records' contributions, routed to their store's partition (one shuffle),
   then aggregated per key there, in Spark (``stores.apply``);
2. one task per store that folds them into the touched keys' rows in SQLite
   and returns those rows: the epoch's changelog, which is what the operator
   emits, what an incremental snapshot holds and what an upsert sink commits.
   For a local state root the same task writes it as the subtask's delta file
   of checkpoint n (Flink's changelog backend persists state changes as it
   goes, likewise), its rows and checksum observed in that pass; the
   asynchronous phase then only seals and acks it.

A catch-up runs its pending epochs together (``Dataflow.epochs``): one Spark job
aggregates the records per key, each epoch's contributions merged in a column of
their own (``apply._per_key``: a catch-up's keys recur from epoch to epoch, so the
aggregation holds one row per key, not one per key and epoch), and each store's
task unpivots its keys' rows per epoch, folds them in epoch order in one
transaction and writes each epoch's delta, so the epochs cost one job, not one
each. Where the records reach the aggregate row by
row from a scan of plain lines, that job scans all the epochs' files at once and
tells a record's epoch by its file (``epoch_source.epoch_of_file``). The rows
each task returns are only counted and checksummed as they pass (``apply._metrics``):
an epoch's changes, for whatever reads them, are its delta files.

A full snapshot reads the stores as of the checkpoint (multi-version, so the
next epoch may already be applied), in Spark tasks: nothing is collected to the
driver. For a local state root those tasks write the snapshot's files
themselves, as they write the deltas (``write_full``).

The driver opens no store. Each task finds its store on its own executor, or
builds it there from the snapshot files of the version it needs
(``spark_jobs.state.stores.loader``): the restored checkpoint's chain, then the deltas
this run's tasks wrote. The snapshots stay the durable truth: a lost executor,
disk or store folder costs a reload, never data. A restore at another
parallelism first splits the checkpoint's state by the new key groups into one
file per new subtask under the state root (``StoreBackend._split``), which the
tasks load.

Which aggregates: count, sum, min, max and mean over integer, floating, string and
boolean columns. A ``combine`` aggregate, an aggregate with a state TTL, a process
function, a window, a join and a loop keep the DataFrame state. ``verify`` always recomputes with the
DataFrame operators, so it checks the stores against an independent path.

Stores live in each executor's local directory (``absreplay-stores`` under
Spark's local dir, ``stores.loader.executor_root``), or under ``ABS_STORE_DIR``
when set: nothing but the state root, the input and the catalog is shared
between hosts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from coordinator.checkpoints import state_files
from coordinator.dataflow.compile import hidden
from coordinator.dataflow.jobs import JobDefinition, StateSpec
from coordinator.settings import Settings
from spark_jobs.records.spark_types import spark_schema
from spark_jobs.state.backend import EpochStep, KeyedState, KeyedStateBackend, RestorePoint, SnapshotTarget, tagged
from spark_jobs.state.keyed_state import SUBTASK, with_subtask
from spark_jobs.state.stores import apply as store_apply
from spark_jobs.state.stores import tasks as store_tasks
from spark_jobs.state.stores.loader import StateFile, StoreEvents, executor_root
from spark_jobs.state.stores.placement import Placement
from spark_jobs.state.stores.store import FORMAT, KEEP, SUPPORTED, Layout, StoreVersionError
from spark_jobs.state.stores.store_state import Stores, StoreVersion, by_store, own_snapshot

BACKEND_ENV = "ABS_STATE_BACKEND"
#: how each built-in aggregate's state columns merge (``aggregate_parts.parts``)
MERGES = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}


def store_root(job: str, incarnation: str | None = None) -> Path:
    """The folder of a job's stores (of one ``incarnation``) on this host: ``ABS_STORE_DIR``'s, or that of an
    executor here with Spark's default local dir (``stores.loader.executor_root``)."""
    configured = Settings.from_env().store_dir
    root = Path(configured).expanduser().resolve() / job if configured else Path(executor_root()) / job
    return root / incarnation if incarnation else root


def incarnation(created: datetime) -> str:
    """A job incarnation's name in its stores' paths: its catalog row's creation time."""
    return f"{created:%Y%m%dT%H%M%S%f}"


def layout_of(node: object, spec: StateSpec) -> Layout | None:
    """The store layout of a keyed aggregate, or None when it keeps the DataFrame state (one with a state TTL
    does: its expiry reads every key each epoch, ``spark_jobs.operators.ttl``)."""
    if getattr(node, "kind", None) != "aggregate" or spec.columns is None or getattr(
            node, "ttl_epochs", None) or getattr(node, "ttl_ms", None):
        return None
    merges, means = [], []
    for name, agg in node.aggregates.items():
        if agg.kind == "mean":
            s, n = hidden(name, "sum"), hidden(name, "count")
            merges += [(s, "sum"), (n, "sum"), (name, "first")]
            means.append((name, s, n))
        elif agg.kind in MERGES:
            merges.append((name, MERGES[agg.kind]))
        else:
            return None
    # a timestamp column needs a zone to map to Arrow (it has none the stores keep: the DataFrame state then)
    schema = to_arrow_schema(spark_schema(spec.columns), timezone="UTC")
    if any(field.type not in SUPPORTED for field in schema):
        return None
    return Layout(schema, tuple(node.key_names), tuple(merges), tuple(means))


@dataclass(frozen=True)
class StoreState(StoreVersion, KeyedState):
    """The store engine's keyed state (``spark_jobs.state.backend``): an epoch folds its records' contributions
    into the keys they touch (``stores.apply``); its snapshot is the delta the epoch's tasks wrote, or what the
    stores' tasks write now (``store_state.own_snapshot``)."""

    folds_epochs_together = True
    versions_kept = KEEP

    @property
    def carries_applies(self) -> bool:
        """Pinned stores only: a carried apply's metrics are read from the plan under the pinned RDD."""
        return self.stores.placement is not None

    @property
    def emitted(self) -> DataFrame | None:
        return self.changes

    @property
    def task_loads(self) -> Mapping[int, tuple[str, float, str | None]]:
        return self.loads or {}

    def _planned(self, step: EpochStep) -> store_apply.Applying:
        return store_apply.planned(step.spark, self, [step.checkpoint_id],
                                   tagged(step.records(), step.checkpoint_id), step.node, step.subtasks,
                                   step.volume, step.carried)

    def apply(self, step: EpochStep) -> StoreState:
        return self._planned(step).run()[0]

    def chained(self, step: EpochStep, into: KeyedState) -> store_apply.Applying | None:
        return self._planned(step) if store_apply.chainable([step.checkpoint_id], step.subtasks, into) else None

    def apply_epochs(self, spark: SparkSession, node: Any, ids: list[int], records: DataFrame,
                     volume: int | None) -> list[StoreState]:
        return store_apply.aggregate(spark, self, ids, records, node, None, volume)

    def keep_past(self, before: KeyedState, behind: frozenset[int], key: tuple[str, ...], parallelism: int,
                  max_parallelism: int) -> StoreState:
        return self  # its apply took only the records of the subtasks behind; the others' stores stay

    def prefers_full(self, spec: StateSpec, base: int, changed: int, full_rows: int) -> bool:
        """Never: its delta is the epoch's changes, already written, while a full snapshot reads every store;
        and its runs restore from the stores, not the files."""
        return False

    def write_files(self, target: SnapshotTarget) -> dict:
        # a partial recovery keeps the files of the subtasks past the epoch: those are written here, not by tasks
        metrics = own_snapshot(target.spark, self, target.full, target.base) if target.subtasks is None else None
        if metrics is None:
            metrics = target.write_rows(self.rows(target.spark, None if target.full else target.base), self.columns,
                                        target.base)
        return metrics


class StoreBackend(KeyedStateBackend):
    """The stores of a run's keyed aggregates: what their tasks need to find or build them at the restore point.
    Opens none: the tasks do, on their executors (``stores.loader``)."""

    def __init__(self, spark: SparkSession, job: JobDefinition, nodes: dict, state_uri: str,
                 max_parallelism: int, incarnation: str, seen: dict[str, dict[int, str]] | None = None) -> None:
        self.spark, self.job, self.state_uri = spark, job, state_uri
        p = job.parallelism
        self.states: dict[str, StoreState] = {}
        self.events = spark.sparkContext.accumulator([], StoreEvents())
        # where an earlier run's tasks left the stores: its executors are gone, their hosts hold the stores
        self.placement = Placement(spark, seen or {})
        configured = Settings.from_env().store_dir
        root = str(Path(configured).expanduser().resolve()) if configured else ""
        snapshots = f"{state_files.normalize_root(state_uri)}/{job.name}"
        for spec in job.states:
            layout = layout_of(nodes[spec.operator], spec)
            if layout is not None:
                # checkpoint ids are a job's (never reused), so a version names one state of one incarnation of
                # the job (its catalog row), one layout and one parallelism
                shape = hashlib.sha256(repr((FORMAT, layout.schema.to_string(), layout.merges)).encode()).hexdigest()[:12]
                path = f"{job.name}/{incarnation}/{spec.operator}/p{p}-g{max_parallelism}-{shape}"
                stores = Stores(spec.operator, root, path, layout, spark_schema(spec.columns), p, max_parallelism,
                                self.events, snapshots, self.placement)
                self.states[spec.operator] = StoreState(stores, 0, ())

    @classmethod
    def of(cls, spark: SparkSession, job: JobDefinition, nodes: dict, state_uri: str, max_parallelism: int,
           incarnation: str, seen: Callable[[], dict[str, dict[int, str]]]) -> StoreBackend | None:
        """The run's stores (None with the DataFrame state backend); ``seen``: where the last run left them."""
        if Settings.from_env().state_backend != "local":
            return None
        return cls(spark, job, nodes, state_uri, max_parallelism, incarnation, seen())

    @property
    def operators(self) -> set[str]:
        return set(self.states)

    @property
    def reads_own_files(self) -> set[str]:
        return set(self.states)

    def open(self, point: RestorePoint) -> dict[str, StoreState]:
        """Every store at its point: found by its tasks where their executors hold it, else loaded from the
        restored chain. A checkpoint taken at another parallelism is split first (``_split``), its state read as
        restored and checked; a partial recovery's chains mix checkpoints, so every task loads from the files."""
        p, out = self.job.parallelism, {}
        for op, st in self.states.items():
            version = point.point(op) or 0
            chain = point.links.get(op, [])
            if chain and point.taken_at != p:
                files = self._split(st, point.read(op), version)
            else:
                per = {i: [] for i in range(p)}
                for link in chain:  # newest first per subtask
                    per[link.subtask].insert(0, StateFile(link.uri, link.rows, link.checkpoint_id))
                files = tuple(tuple(per[i]) for i in range(p))
            out[op] = replace(st, version=version, files=files, reload=point.partial)
        return out

    def _split(self, state: StoreState, rows: DataFrame, version: int) -> tuple[tuple[StateFile, ...], ...]:
        """The state at ``version``, taken at another parallelism, split by the new key groups into one file
        per subtask under ``<job>/_rescaled/`` in the state root (any filesystem): the files its stores load."""
        keys, p = list(state.stores.layout.keys), state.parallelism
        folder = f"{state_files.spark_uri(self.state_uri)}/{self.job.name}/_rescaled/{version}-p{p}/{state.operator}"
        state_files.delete_dir(folder)
        data = with_subtask(rows.select(*state.columns), keys, p, state.stores.max_parallelism)
        split = store_tasks.split_task(state.stores.layout, SUBTASK, folder)
        written = dict(by_store(data, p).sortWithinPartitions(*keys).mapInArrow(
            split, f"{SUBTASK} int, rows long").collect())
        if sorted(written) != list(range(p)):
            raise StoreVersionError(f"splitting the state of {state.operator} for parallelism {p}: subtasks "
                                    f"{sorted(written)} written, expected 0..{p - 1}")
        return tuple((StateFile(f"{folder}/{SUBTASK}={i}", written[i], version, sealed=False),) if written[i] else ()
                     for i in range(p))
