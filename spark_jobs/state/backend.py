"""The keyed-state backend interface: one contract, one implementation per state engine.

As Spark's ``StateStoreProvider`` and Flink's ``KeyedStateBackend``, a run sees its keyed state only
through this module:

1. ``KeyedStateBackend.open``: each engine restores the operators it keeps at the restore point;
2. ``KeyedState.apply``: an epoch applied to an operator's state gives its next state, immutable, whose
   ``emitted`` rows are what the operator emits for the epoch;
3. ``KeyedState.snapshot``: the synchronous phase, an immutable ``Snapshot`` of the state at checkpoint n
   (nothing is copied: every state is immutable already);
4. ``Snapshot.write``: the asynchronous phase, on the writer thread: the snapshot's files, sealed, and one
   state handle per subtask to ack.

Two engines: ``frames`` (the state one DataFrame, every operator kind) and ``stores`` (keyed aggregates on
executor-local stores). A third is one folder implementing these two classes and passing
``tests/state/test_backend_contract.py``; the run chooses an engine per operator (``spark_jobs.run.engines``).
What an engine can do beyond the contract (fold several epochs in one job, run an apply inside the next
one's job) it says by its capabilities, never by its type.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from coordinator.checkpoints import manifests
from coordinator.checkpoints.state_chain import ChainLink
from coordinator.checkpoints.state_handle import StateHandle
from coordinator.dataflow.jobs import StateSpec
from spark_jobs.state import keyed_state


#: the column that tells ``KeyedState.apply_epochs`` a record's epoch (``tagged``)
EPOCH = "_abs_epoch"


def tagged(rows: DataFrame, checkpoint_id: int) -> DataFrame:
    """The records of one epoch, tagged with it for ``KeyedState.apply_epochs``."""
    return rows.withColumn(EPOCH, F.lit(checkpoint_id).cast("long"))


@dataclass(frozen=True)
class RestorePoint:
    """What a run's restore read (``spark_jobs.run.restore``), for each engine to open its operators at."""

    #: one checkpoint (None: none), or each operator's own (a weak job)
    points: int | None | Mapping[str, int | None]
    #: operator -> its chain of snapshot files at its point
    links: Mapping[str, list[ChainLink]]
    #: the parallelism the point was taken at (None: unknown, or no checkpoint)
    taken_at: int | None
    #: some subtasks are past the point (a partial recovery)
    partial: bool
    #: operator -> its state read and checked as one DataFrame; None where the engine reads its files itself
    frames: Mapping[str, DataFrame | None]
    #: an operator's state as one DataFrame, read and checked now (where ``frames`` has None)
    read: Callable[[str], DataFrame]

    def point(self, operator: str) -> int | None:
        return self.points.get(operator) if isinstance(self.points, Mapping) else self.points


@dataclass(frozen=True)
class EpochStep:
    """One operator's epoch, as the dataflow hands it to the operator's state."""

    spark: SparkSession
    #: the declared operator (``coordinator.dataflow.declaration``)
    node: Any
    checkpoint_id: int
    #: the operator's input for the epoch, planned when first asked for
    records: Callable[[], DataFrame]
    #: the operator over its whole state as one DataFrame: (state n, what it emits); what an engine that
    #: keeps the state as a DataFrame runs
    compute: Callable[[DataFrame | None], tuple[DataFrame, DataFrame]]
    #: a partial recovery: only these subtasks take the epoch's records (None: all)
    subtasks: frozenset[int] | None = None
    #: the epoch's source records (an engine may plan by them)
    volume: int | None = None
    #: applies planned into this one's job (``KeyedState.chained``)
    carried: tuple[PlannedApply, ...] = ()


class PlannedApply(Protocol):
    """An apply planned but not run (``KeyedState.chained``): the job of the apply its rows feed runs it."""

    #: the rows it changes, for the next operator to plan on
    rows: DataFrame
    #: the states after it, once the job that carried it ran
    states: list[KeyedState] | None


@dataclass(frozen=True)
class SnapshotTarget:
    """Where and how the asynchronous phase writes one operator's snapshot of checkpoint ``checkpoint_id``."""

    spark: SparkSession
    spec: StateSpec
    checkpoint_id: int
    #: the operator's folder of the checkpoint (``chk-n/<operator>/``), and the job's root the seal names files by
    uri: str
    job_root: str
    #: every row (full) or the rows changed since ``base``
    full: bool
    base: int | None
    parallelism: int
    max_parallelism: int
    #: a partial recovery: write and ack only these subtasks, keep the others' files (None: all)
    subtasks: frozenset[int] | None = None
    watermark: int | None = None
    #: subtask -> keys the state TTL dropped in the epoch (acked as ``keys_dropped``)
    dropped: Mapping[int, int] = field(default_factory=dict)

    def write_rows(self, rows: DataFrame, columns: list[str], changes_since: int | None,
                   one_file_per_subtask: bool = False) -> dict:
        """``rows`` written by subtask (``keyed_state.write_snapshot``), observed as they are written: the metrics
        ``write_files`` returns, over the state's ``columns`` (every row a change when ``changes_since`` is
        None). ``one_file_per_subtask``: rows of several shuffles' partitions, gathered first."""
        snap = keyed_state.with_subtask(rows, self.spec.key, self.parallelism, self.max_parallelism)
        if one_file_per_subtask:
            snap = snap.repartition(keyed_state.SUBTASK)
        if self.subtasks is not None:
            snap = snap.where(F.col(keyed_state.SUBTASK).isin(sorted(self.subtasks)))
        observation = Observation(f"snapshot-{self.checkpoint_id}-{self.spec.operator}")
        observed = snap.observe(observation, *keyed_state.snapshot_metrics(columns, self.parallelism, changes_since))
        keyed_state.write_snapshot(observed, self.uri, only_written_subtasks=self.subtasks is not None)
        return observation.get


@dataclass(frozen=True)
class WrittenSnapshot:
    """What ``Snapshot.write`` wrote: one handle per subtask, and the counts the next full/incremental
    choice reads."""

    handles: list[StateHandle]
    manifest: manifests.Manifest
    full: bool
    #: the state's rows over its subtasks, and the rows changed since the base
    rows: int
    changed: int


@dataclass(frozen=True)
class Snapshot:
    """An operator's state at checkpoint ``checkpoint_id``, immutable: the synchronous phase's result, for the
    writer thread to write."""

    state: KeyedState
    checkpoint_id: int

    def write(self, target: SnapshotTarget) -> WrittenSnapshot:
        """The asynchronous phase: the engine writes the files, then they are sealed (durable before the ack,
        and described so that a commit can verify what it reads) and each subtask gets its handle."""
        metrics = self.state.write_files(target)
        manifest = manifests.seal(target.uri, target.job_root)
        stats = keyed_state.stats_from_metrics(metrics, target.parallelism)
        handles = []
        for i in range(target.parallelism):
            st = stats[i]
            uri = f"{target.uri}/subtask={i}" if st.rows else None
            handles.append(StateHandle(
                operator=target.spec.operator, subtask=i, state_uri=uri,
                base_checkpoint_id=None if target.full else target.base,
                state_bytes=manifest.bytes_under(f"subtask={i}") if uri else 0, state_rows=st.rows,
                checksum=st.checksum if st.rows else None, watermark=target.watermark,
                keys_dropped=target.dropped.get(i, 0), **load_columns(self.state.task_loads.get(i))))
        return WrittenSnapshot(handles, manifest, target.full, sum(x.rows for x in stats.values()),
                               int(metrics["changed"] or 0))


def load_columns(found: tuple[str, float, str | None] | None) -> dict:
    """How an epoch's task found a subtask's state (``KeyedState.task_loads``), as ack columns."""
    return {} if found is None else {"store_event": found[0], "store_load_ms": round(found[1] * 1000),
                                     "store_location": found[2]}


class KeyedState(ABC):
    """One keyed operator's state at one version, immutable: what the next epoch applies to, and what the
    snapshot of that version reads, while later epochs go on."""

    #: whether ``apply_epochs`` folds several epochs in one job (a catch-up)
    folds_epochs_together = False
    #: whether another operator's apply may run inside this one's job (``chained``)
    carries_applies = False
    #: how many versions back this state's engine can still be read as of once later epochs are applied
    versions_kept = 1

    #: the operator whose state it is
    operator: str

    @property
    @abstractmethod
    def columns(self) -> list[str]:
        """The state's columns: its key's, its values, ``updated``."""

    # -- an epoch --------------------------------------------------------------------------------------
    @abstractmethod
    def apply(self, step: EpochStep) -> KeyedState:
        """The state after the epoch; its ``emitted`` rows are what the operator emits for it."""

    @property
    @abstractmethod
    def emitted(self) -> DataFrame | None:
        """What the operator emitted in the epoch that made this state (None: restored, no epoch yet)."""

    def chained(self, step: EpochStep, into: KeyedState) -> PlannedApply | None:
        """The epoch's apply planned for the job of ``into``'s apply to run (nothing else reads its rows); None
        where this engine cannot, and the dataflow applies it on its own."""
        return None

    def apply_epochs(self, spark: SparkSession, node: Any, ids: list[int], records: DataFrame,
                     volume: int | None) -> list[KeyedState]:
        """Epochs ``ids`` at once (``records`` tagged with their epoch), their states in order; only where
        ``folds_epochs_together``."""
        raise NotImplementedError(f"{type(self).__name__} applies one epoch at a time")

    @abstractmethod
    def keep_past(self, before: KeyedState, behind: frozenset[int], key: tuple[str, ...], parallelism: int,
                  max_parallelism: int) -> KeyedState:
        """A partial recovery: this state for the subtasks ``behind`` the epoch, ``before``'s for the others
        (already past it, they discard its records)."""

    @property
    def task_loads(self) -> Mapping[int, tuple[str, float, str | None]]:
        """How the apply that made this state found each subtask's state: subtask -> ("hit" | "reload", seconds,
        the executor); empty where an engine loads nothing."""
        return {}

    # -- a snapshot ------------------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> Snapshot:
        """The synchronous phase: the state is immutable, so its snapshot copies nothing."""
        return Snapshot(self, checkpoint_id)

    @abstractmethod
    def rows(self, spark: SparkSession, since: int | None = None) -> DataFrame:
        """The state's rows (``since``: only those changed after that checkpoint)."""

    @abstractmethod
    def prefers_full(self, spec: StateSpec, base: int, changed: int, full_rows: int) -> bool:
        """Whether the next snapshot, which could be incremental on ``base``, had better be full: ``changed``,
        the rows the last snapshot changed; ``full_rows``, the rows of the last full one."""

    @abstractmethod
    def write_files(self, target: SnapshotTarget) -> dict:
        """The snapshot's files under ``target.uri`` (``keyed_state.write_rows``'s layout), and their metrics
        (``keyed_state.snapshot_metrics``: rows and checksum per subtask, rows changed since the base)."""

    def forget_bases(self) -> None:
        """A snapshot failed: what this engine held of its bases may be gone (a lost executor)."""


class KeyedStateBackend(ABC):
    """An engine keeping the keyed state of some of a run's operators."""

    @property
    @abstractmethod
    def operators(self) -> set[str]:
        """The operators whose state it keeps."""

    @property
    def reads_own_files(self) -> set[str]:
        """Its operators whose snapshot files it reads itself: the restore reads only their chains."""
        return set()

    @abstractmethod
    def open(self, point: RestorePoint) -> dict[str, KeyedState]:
        """Each of its operators' state at the restore point."""
