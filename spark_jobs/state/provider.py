"""Keyed aggregates on local stores: an epoch reads and writes the keys it touches, not the state.

With the ``spark`` backend (``spark_jobs.operators.keyed_operators.aggregate``) a keyed
aggregate's state is one DataFrame that every epoch unions with its records and
aggregates again: the cost of an epoch grows with the state. With the ``local``
backend (the default; ``ABS_STATE_BACKEND``) each subtask's state lives in a
SQLite store beside the tasks (``spark_jobs.state.store``), and an epoch is

1. the records' contributions, routed to their store's partition (one shuffle),
   then aggregated per key there, in Spark (``state.apply``);
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
(``spark_jobs.state.loader``): the restored checkpoint's chain, then the deltas
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
Spark's local dir, ``state.loader.executor_root``), or under ``ABS_STORE_DIR``
when set: nothing but the state root, the input and the catalog is shared
between hosts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from pyspark import Accumulator
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, StructField, StructType

from coordinator.checkpoints import state_files
from coordinator.checkpoints.state_chain import ChainLink
from coordinator.dataflow.jobs import JobDefinition, StateSpec
from coordinator.errors import StateIntegrityError
from coordinator.settings import Settings
from coordinator.dataflow.compile import hidden
from spark_jobs.state import tasks as store_tasks
from spark_jobs.state.keyed_state import SUBTASK, snapshot_metrics, with_subtask
from spark_jobs.state.store import FORMAT, SUPPORTED, Layout, StoreVersionError
from spark_jobs.records.spark_types import spark_schema
from spark_jobs.state.placement import Placement
from spark_jobs.state.loader import INTEGRITY, StateFile, StoreAt, StoreEvents, executor_root

T = TypeVar("T")

BACKEND_ENV = "ABS_STATE_BACKEND"
#: how each built-in aggregate's state columns merge (``aggregate_parts.parts``)
MERGES = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}


def store_root(job: str, incarnation: str | None = None) -> Path:
    """The folder of a job's stores (of one ``incarnation``) on this host: ``ABS_STORE_DIR``'s, or that of an
    executor here with Spark's default local dir (``state.loader.executor_root``)."""
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
class StoreState:
    """A keyed aggregate's state at ``version``: its stores, and the epoch's changed rows."""

    operator: str
    #: ``ABS_STORE_DIR``'s folder of the job, "" for each executor's own (``state.loader.StoreAt``)
    root: str
    #: the stores' folder under it: ``<job>/<incarnation>/<operator>/<layout>``
    path: str
    layout: Layout
    schema: StructType
    parallelism: int
    max_parallelism: int
    version: int
    #: per subtask, the files its state at ``version`` is loaded from where a task finds no store holding it
    #: (``state.loader.StoreAt.files``); None: none (this run's deltas unwritten: the snapshot writer writes them)
    files: tuple[tuple[StateFile, ...], ...] | None
    #: the tasks report hits and reloads here (``state.loader.StoreEvents``)
    events: Accumulator
    #: the job's snapshot folder under the state root, on any filesystem (the epoch's tasks write its delta there)
    snapshots: str
    #: the version the epoch started from, and what plans the rows it changed (None: restored, no epoch yet)
    prev: int | None = None
    changes_of: Callable[[], DataFrame] | None = None
    #: the delta the epoch's tasks wrote to chk-<version>/<operator>/: rows and checksum per subtask,
    #: observed as they were written (None: not written; the snapshot writer writes it)
    written: dict | None = None
    #: the next tasks load their stores from ``files`` even where one holds ``version`` (a partial recovery)
    reload: bool = False
    #: how the apply that made this state found each subtask's store: subtask -> ("hit" | "reload", seconds,
    #: the executor it ran on or None)
    loads: dict | None = None
    #: where the stores are, to send their tasks back there (``state.placement``; None: anywhere)
    placement: Placement | None = None

    @property
    def columns(self) -> list[str]:
        return self.schema.fieldNames()

    @property
    def at(self) -> StoreAt:
        """What a task of this state needs (``state.loader``)."""
        return StoreAt(self.root, self.path, self.layout, self.version, self.files, self.reload)

    @property
    def changes(self) -> DataFrame | None:
        """The rows the epoch changed, planned when first asked for (often nothing reads them)."""
        return None if self.changes_of is None else self.changes_of()

    def checkpoint_dir(self, checkpoint_id: int) -> str:
        """The operator's folder of checkpoint ``checkpoint_id`` under ``snapshots``."""
        return f"{self.snapshots}/chk-{checkpoint_id}/{self.operator}"

    def rows(self, spark: SparkSession, since: int | None = None) -> DataFrame:
        """The state as of ``version`` (``since``: the rows changed after that version), read by one
        Spark task per store."""
        if (since or 0) == self.prev and self.changes is not None:  # version 0: the stores were empty
            return self.changes
        return self.one_per_store(spark).mapInArrow(store_tasks.read_task(self.at, self.operator, self.events, since),
                                        self.schema)

    def one_per_store(self, spark: SparkSession) -> DataFrame:
        """A placeholder row per store, partition i holding store i's, each where its store is."""
        return self.pinned(spark.range(0, self.parallelism, 1, self.parallelism))

    def pinned(self, df: DataFrame) -> DataFrame:
        """``df`` (partition i: store i) sent where the stores are (``state.placement``)."""
        return df if self.placement is None else self.placement.pinned(df, self.operator, self.parallelism)

    def applied_loads(self) -> dict[int, tuple[str, float, str | None]]:
        """How the apply from this state found each subtask's store (its tasks' events, ``state.loader``), and
        the executor it ran on: a group of epochs applied at once is one apply, reported with its first epoch."""
        where = {} if self.placement is None else self.placement.where(self.operator)
        return {e[1]: (e[4], e[5], where.get(e[1])) for e in self.events.value
                if e[0] == self.operator and e[2] == self.version and e[3] == "apply"}

    def after(self, version: int, delta: str, rows: dict[int, int]) -> tuple | None:
        """``files`` at ``version``, applied on this state: these plus the epoch's delta its tasks wrote to
        folder ``delta`` (``rows`` per subtask); None where these are None."""
        if self.files is None:
            return None
        return tuple(mine + ((StateFile(f"{delta}/{SUBTASK}={i}", rows[i], version, sealed=False),)
                             if rows.get(i) else ()) for i, mine in enumerate(self.files))


def write_full(spark: SparkSession, state: StoreState, base: int | None) -> dict:
    """The full snapshot of the stores as of ``state.version``: one task per store
    writes its subtask's file, as the deltas are written (none of Spark's file commit protocol). Returns the
    rows and checksum of each subtask and the rows changed after ``base``, as the snapshot writer observes them
    (``keyed_state.snapshot_metrics``)."""
    folder = state.checkpoint_dir(state.version)
    state_files.delete_dir(folder)  # the epoch's delta, an earlier attempt's files
    dump = store_tasks.dump_task(state.at, state.operator, state.events, folder, SUBTASK)
    rows = state.one_per_store(spark).mapInArrow(
        dump, StructType([*state.schema.fields, StructField(SUBTASK, IntegerType(), False)]))
    observation = Observation(f"full-{state.version}-{state.operator}")
    integrity_checked(lambda: rows.observe(observation, *snapshot_metrics(
        state.columns, state.parallelism, base)).write.format("noop").mode("overwrite").save())
    return observation.get


def own_snapshot(spark: SparkSession, state: StoreState, full: bool, base: int | None) -> dict | None:
    """The metrics (``keyed_state.snapshot_metrics``) of the snapshot files of checkpoint ``state.version``
    when the stores' tasks write them: the delta the epoch's tasks wrote, incremental on ``base`` (on the job's
    first snapshot the stores started empty, so that delta is the whole state), or, full, what they write now
    (``write_full``). None: the snapshot writer writes them from ``StoreState.rows``."""
    if state.written is not None and state.prev == (base or 0) and (not full or base is None):
        metrics = dict(state.written["metrics"])
        metrics["changed"] = sum(metrics.get(f"rows_{i}") or 0 for i in range(state.parallelism))
        return metrics
    if full:
        return write_full(spark, state, base)
    return None


def by_store(rows: DataFrame, parallelism: int) -> DataFrame:
    """``rows`` (with a subtask column) partitioned so that Spark partition i holds subtask i's rows alone:
    one task per store, run for every store (rows or not), and an aggregation grouping by the subtask
    column after it adds no shuffle."""
    return rows.repartitionById(parallelism, SUBTASK)


def integrity_checked(action: Callable[[], T]) -> T:
    """``action`` (a Spark action running store tasks), a task's integrity failure (``state.loader.INTEGRITY``)
    raised as the ``StateIntegrityError`` it names, in one line, instead of Spark's traceback."""
    try:
        return action()
    except Exception as exc:  # noqa: BLE001 - Spark wraps a task's error in several kinds
        text = str(exc)
        if INTEGRITY not in text:
            raise
        raise StateIntegrityError(text.split(INTEGRITY, 1)[1].splitlines()[0]) from None


class StoreBackend:
    """The stores of a run's keyed aggregates: what their tasks need to find or build them at the restore point.
    Opens none: the tasks do, on their executors (``state.loader``)."""

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
                self.states[spec.operator] = StoreState(spec.operator, root, path, layout, spark_schema(spec.columns),
                                                        p, max_parallelism, 0, (), self.events, snapshots,
                                                        placement=self.placement)

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

    def open(self, points: int | None | dict[str, int | None], links: dict[str, list[ChainLink]],
             taken_at: int | None, reload: bool, read: Callable[[str], DataFrame]) -> dict[str, StoreState]:
        """Every store at ``points`` (one checkpoint, or one per operator): found by its tasks where their
        executors hold it, else loaded from the restored chain ``links``. ``taken_at``: the parallelism of the
        checkpoint (another splits it first, ``_split``, its state ``read`` as restored and verified);
        ``reload``: every task loads from the files (a partial recovery's chains mix checkpoints)."""
        p, out = self.job.parallelism, {}
        for op, st in self.states.items():
            point = _at(points, op) or 0
            chain = links.get(op, [])
            if chain and taken_at != p:
                files = self._split(st, read(op), point)
            else:
                per = {i: [] for i in range(p)}
                for link in chain:  # newest first per subtask
                    per[link.subtask].insert(0, StateFile(link.uri, link.rows, link.checkpoint_id))
                files = tuple(tuple(per[i]) for i in range(p))
            out[op] = replace(st, version=point, files=files, reload=reload)
        return out

    def _split(self, state: StoreState, rows: DataFrame, version: int) -> tuple[tuple[StateFile, ...], ...]:
        """The state at ``version``, taken at another parallelism, split by the new key groups into one file
        per subtask under ``<job>/_rescaled/`` in the state root (any filesystem): the files its stores load."""
        keys, p = list(state.layout.keys), state.parallelism
        folder = f"{state_files.spark_uri(self.state_uri)}/{self.job.name}/_rescaled/{version}-p{p}/{state.operator}"
        state_files.delete_dir(folder)
        data = with_subtask(rows.select(*state.columns), keys, p, state.max_parallelism)
        split = store_tasks.split_task(state.layout, SUBTASK, folder)
        written = dict(by_store(data, p).sortWithinPartitions(*keys).mapInArrow(
            split, f"{SUBTASK} int, rows long").collect())
        if sorted(written) != list(range(p)):
            raise StoreVersionError(f"splitting the state of {state.operator} for parallelism {p}: subtasks "
                                    f"{sorted(written)} written, expected 0..{p - 1}")
        return tuple((StateFile(f"{folder}/{SUBTASK}={i}", written[i], version, sealed=False),) if written[i] else ()
                     for i in range(p))

    def report(self) -> list[tuple]:
        """The store events of the tasks run since the last call: (operator, subtask, version, "hit" or "reload",
        seconds, rows loaded)."""
        events = list(self.events.value)
        self.events.value = []
        return events


def _at(point: int | None | dict[str, int | None], operator: str) -> int | None:
    return point.get(operator) if isinstance(point, dict) else point
