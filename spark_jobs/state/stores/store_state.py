"""A keyed aggregate's stores at one version (``StoreVersion``): where they are, what a task needs to find or
build them, how the state is read as of that version, and how the stores' tasks write its snapshot files.
Below the apply (``stores.apply``) and the engine (``stores.provider``), which build on it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pyspark import Accumulator
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql.types import IntegerType, StructField, StructType

from coordinator.checkpoints import state_files
from coordinator.errors import StateIntegrityError
from spark_jobs.state.keyed_state import SUBTASK, snapshot_metrics
from spark_jobs.state.stores import tasks as store_tasks
from spark_jobs.state.stores.loader import INTEGRITY, StateFile, StoreAt
from spark_jobs.state.stores.placement import Placement
from spark_jobs.state.stores.store import Layout

T = TypeVar("T")


@dataclass(frozen=True)
class Stores:
    """A keyed aggregate's stores in a run: one per subtask, where they are and what they hold."""

    operator: str
    #: ``ABS_STORE_DIR``'s folder of the job, "" for each executor's own (``stores.loader.StoreAt``)
    root: str
    #: the stores' folder under it: ``<job>/<incarnation>/<operator>/<layout>``
    path: str
    layout: Layout
    schema: StructType
    parallelism: int
    max_parallelism: int
    #: the tasks report hits and reloads here (``stores.loader.StoreEvents``)
    events: Accumulator
    #: the job's snapshot folder under the state root, on any filesystem (the epoch's tasks write its delta there)
    snapshots: str
    #: where the stores are, to send their tasks back there (``stores.placement``; None: anywhere)
    placement: Placement | None = None


@dataclass(frozen=True)
class StoreVersion:
    """A keyed aggregate's state at ``version``: its stores, and the epoch's changed rows (the engine's
    ``KeyedState`` on top: ``provider.StoreState``)."""

    stores: Stores
    version: int
    #: per subtask, the files its state at ``version`` is loaded from where a task finds no store holding it
    #: (``stores.loader.StoreAt.files``); None: none (this run's deltas unwritten: the snapshot writer writes them)
    files: tuple[tuple[StateFile, ...], ...] | None
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

    @property
    def operator(self) -> str:
        return self.stores.operator

    @property
    def schema(self) -> StructType:
        return self.stores.schema

    @property
    def parallelism(self) -> int:
        return self.stores.parallelism

    @property
    def columns(self) -> list[str]:
        return self.schema.fieldNames()

    @property
    def at(self) -> StoreAt:
        """What a task of this state needs (``stores.loader``)."""
        return StoreAt(self.stores.root, self.stores.path, self.stores.layout, self.version, self.files, self.reload)

    @property
    def changes(self) -> DataFrame | None:
        """The rows the epoch changed, planned when first asked for (often nothing reads them)."""
        return None if self.changes_of is None else self.changes_of()

    def checkpoint_dir(self, checkpoint_id: int) -> str:
        """The operator's folder of checkpoint ``checkpoint_id`` under ``snapshots``."""
        return f"{self.stores.snapshots}/chk-{checkpoint_id}/{self.operator}"

    def rows(self, spark: SparkSession, since: int | None = None) -> DataFrame:
        """The state as of ``version`` (``since``: the rows changed after that version), read by one
        Spark task per store."""
        if (since or 0) == self.prev and self.changes is not None:  # version 0: the stores were empty
            return self.changes
        return self.one_per_store(spark).mapInArrow(store_tasks.read_task(self.at, self.operator, self.stores.events, since),
                                        self.schema)

    def one_per_store(self, spark: SparkSession) -> DataFrame:
        """A placeholder row per store, partition i holding store i's, each where its store is."""
        return self.pinned(spark.range(0, self.parallelism, 1, self.parallelism))

    def pinned(self, df: DataFrame) -> DataFrame:
        """``df`` (partition i: store i) sent where the stores are (``stores.placement``)."""
        placement = self.stores.placement
        return df if placement is None else placement.pinned(df, self.operator, self.parallelism)

    def applied_loads(self) -> dict[int, tuple[str, float, str | None]]:
        """How the apply from this state found each subtask's store (its tasks' events, ``stores.loader``), and
        the executor it ran on: a group of epochs applied at once is one apply, reported with its first epoch."""
        where = {} if self.stores.placement is None else self.stores.placement.where(self.operator)
        return {e.subtask: (e.found, e.seconds, where.get(e.subtask)) for e in self.stores.events.value
                if e.operator == self.operator and e.version == self.version and e.task == "apply"}

    def after(self, version: int, delta: str, rows: dict[int, int]) -> tuple | None:
        """``files`` at ``version``, applied on this state: these plus the epoch's delta its tasks wrote to
        folder ``delta`` (``rows`` per subtask); None where these are None."""
        if self.files is None:
            return None
        return tuple(mine + ((StateFile(f"{delta}/{SUBTASK}={i}", rows[i], version, sealed=False),)
                             if rows.get(i) else ()) for i, mine in enumerate(self.files))


def write_full(spark: SparkSession, state: StoreVersion, base: int | None) -> dict:
    """The full snapshot of the stores as of ``state.version``: one task per store
    writes its subtask's file, as the deltas are written (none of Spark's file commit protocol). Returns the
    rows and checksum of each subtask and the rows changed after ``base``, as the snapshot writer observes them
    (``keyed_state.snapshot_metrics``)."""
    folder = state.checkpoint_dir(state.version)
    state_files.delete_dir(folder)  # the epoch's delta, an earlier attempt's files
    dump = store_tasks.dump_task(state.at, state.operator, state.stores.events, folder, SUBTASK)
    rows = state.one_per_store(spark).mapInArrow(
        dump, StructType([*state.schema.fields, StructField(SUBTASK, IntegerType(), False)]))
    observation = Observation(f"full-{state.version}-{state.operator}")
    integrity_checked(lambda: rows.observe(observation, *snapshot_metrics(
        state.columns, state.parallelism, base)).write.format("noop").mode("overwrite").save())
    return observation.get


def own_snapshot(spark: SparkSession, state: StoreVersion, full: bool, base: int | None) -> dict | None:
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
    """``action`` (a Spark action running store tasks), a task's integrity failure (``stores.loader.INTEGRITY``)
    raised as the ``StateIntegrityError`` it names, in one line, instead of Spark's traceback."""
    try:
        return action()
    except Exception as exc:  # noqa: BLE001 - Spark wraps a task's error in several kinds
        text = str(exc)
        if INTEGRITY not in text:
            raise
        raise StateIntegrityError(text.split(INTEGRITY, 1)[1].splitlines()[0]) from None
