"""An epoch's records folded into a keyed aggregate's stores: the Spark plan (``aggregate``).

One epoch, or a catch-up's several at once (``Dataflow.epochs``), is one Spark job of two stages
per aggregate: the records' contributions routed to their store's partition (the one shuffle),
merged per key where they land, and handed to the store's task (``stores.tasks.apply_task``),
which folds them and writes each epoch's delta; the rows it returns are counted and checksummed
as they pass (``Applying.run``). Past ``ROUTE_FIRST_UP_TO`` source records the contributions are
merged per key before the routing instead (``_per_key``).

A chain of aggregates, each fed by the changes of the one before (the synthetic job's three),
is one job for an epoch, not one per aggregate (``planned``, ``chainable``): an aggregate's
changed rows go from its store's task straight into the next one's routing, without being read
back from the delta files, in a job of one stage more per link. The stores themselves, their
state between epochs and their snapshots: ``stores.provider``.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, replace
from functools import cache, cached_property, partial

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

from coordinator.checkpoints import state_files
from spark_jobs.state import aggregate_parts
from spark_jobs.records.spark_types import spark_type
from spark_jobs.state.stores import tasks as store_tasks
from spark_jobs.state.keyed_state import SUBTASK, group_metrics, metrics_by, quoted, with_subtask
from spark_jobs.state.backend import EPOCH, KeyedState
from spark_jobs.state.stores.store_state import StoreVersion, by_store, integrity_checked

#: ``_per_key`` routes up to this many source records before merging them per key, more after: measured in one
#: local[2] session, single epochs of 1e4-1e5 records and a catch-up of 5e5 used 8-10% less CPU routed first, a
#: catch-up of 1e6 source records (5e6 records into the aggregate, over 5e4 keys) 6% more (docs/benchmarks.md)
ROUTE_FIRST_UP_TO = 500_000
#: ``_per_key``'s columns: a record's epoch as its position in the group (0: none of it), the epochs a key had
SLOT, PRESENT = "_abs_slot", "_abs_present"


def _delta_rows(spark: SparkSession, state: StoreVersion, delta: str, subtasks: list[int]) -> DataFrame:
    """An epoch's changes as its apply wrote them: the delta files of ``subtasks`` (those with rows)."""
    if not subtasks:
        return spark.createDataFrame([], state.schema)
    return spark.read.schema(state.schema).parquet(*[f"{delta}/{SUBTASK}={i}" for i in subtasks])


def _per_key(rows: DataFrame, node: object, state: StoreVersion, ids: list[int], subtasks: frozenset[int] | None,
             records: int | None) -> tuple[DataFrame, list[str]]:
    """Each key's contributions of every epoch of ``ids`` merged in one row per key, not one per key and epoch:
    a catch-up's keys recur from epoch to epoch, so the aggregation holds, and the store's task takes in, one
    row per distinct key of the group rather than up to one per epoch. Column ``<state column>@<j>`` merges
    epoch ``ids[j]``'s contributions, and bit j + 1 of ``PRESENT`` says whether it had any; bit 0, whether the
    key had records of no epoch of ``ids`` (``store_tasks.per_epoch`` hands those to the store's apply, which
    fails). The merged state columns.

    Up to ``ROUTE_FIRST_UP_TO`` source records (``records``; None: few), the records are routed to their
    store's partition first (``store_state.by_store``, the one shuffle), then merged per key where they landed:
    the subtask is one of the aggregation's keys, so the routing satisfies its distribution and Spark adds no
    shuffle of its own. Two stages per aggregate instead of four (a partial aggregation, its shuffle, then
    the routing's). Above it they are merged per key first and the rows routed after, which shuffles one row
    per key instead of every record. ``subtasks``: only these take records (a partial recovery).

    The merges are SQL text, parsed once each: built from Column objects they cost hundreds of py4j calls
    per catch-up, 0.1 s of planning."""
    slot = F.expr(f"CAST(coalesce(array_position(array({', '.join(f'{c}L' for c in ids)}), {EPOCH}), 0) AS INT)")
    contributions = [F.col(k).cast(spark_type(t)).alias(k) for k, t in node.key]
    contributions += [value.alias(column) for name, agg in node.aggregates.items()
                      for column, value, _ in aggregate_parts.parts(name, agg)]
    parts = list(state.stores.layout.merges)  # each state column's merge, by its SQL name (``layout_of``)
    merges = [f"bit_or(shiftleft(1L, {SLOT})) AS {PRESENT}"] + [
        f"{merge}(CASE WHEN {SLOT} = {j + 1} THEN {quoted(column)} END) AS {quoted(f'{column}@{j}')}"
        for j in range(len(ids)) for column, merge in parts]
    keys, p = list(node.key_names), state.parallelism
    contributions = rows.select(*contributions, slot.alias(SLOT))
    if records is not None and records > ROUTE_FIRST_UP_TO:  # merged per key, then routed
        wide = with_subtask(contributions.groupBy(*keys).agg(*[F.expr(m) for m in merges]), keys, p,
                            state.stores.max_parallelism)
        if subtasks is not None:
            wide = wide.where(F.col(SUBTASK).isin(sorted(subtasks)))
        return by_store(wide, p), [column for column, _ in parts]
    routed = with_subtask(contributions, keys, p, state.stores.max_parallelism)
    if subtasks is not None:
        routed = routed.where(F.col(SUBTASK).isin(sorted(subtasks)))
    wide = by_store(routed, p).groupBy(SUBTASK, *keys).agg(*[F.expr(m) for m in merges])
    return wide, [column for column, _ in parts]


def aggregate(spark: SparkSession, state: StoreVersion, ids: list[int], rows: DataFrame, node: object,
              subtasks: frozenset[int] | None = None, records: int | None = None) -> list[StoreVersion]:
    """The records of epochs ``ids`` (each tagged with its epoch in column ``EPOCH``) of a keyed aggregate on
    its stores, in order, in one Spark job: one epoch, or several at once (a catch-up, ``Dataflow.epochs``);
    its state after each. ``subtasks``: only these take records (a partial recovery: the others are past the
    epoch already); ``records``: the source records of the epochs, which choose the plan (``_per_key``)."""
    return planned(spark, state, ids, rows, node, subtasks, records).run()


def planned(spark: SparkSession, state: StoreVersion, ids: list[int], rows: DataFrame, node: object,
            subtasks: frozenset[int] | None = None, records: int | None = None,
            carried: tuple[Applying, ...] = ()) -> Applying:
    """``aggregate``'s job planned, not run: ``Applying.run`` runs it. ``carried``: applies planned before it
    whose changed rows (``Applying.rows``) are among ``rows``: they run inside this one's job (``chainable``)."""
    wide, merged = _per_key(rows, node, state, ids, subtasks, records)  # partition i: store i's keys
    batch = state.pinned(wide)
    # the delta of checkpoint n is its rows: written by the same tasks (a partial recovery leaves it to
    # the snapshot writer, which keeps the files of the subtasks past the epoch)
    deltas = None if subtasks is not None else \
        [state.checkpoint_dir(checkpoint_id) for checkpoint_id in ids]
    for delta in deltas or ():  # an earlier attempt's files (at another parallelism, say) are not this one's
        state_files.delete_dir(delta)

    # each store's task unpivots its keys' rows into one per key and epoch itself (``store_tasks.per_epoch``):
    # unpivoted in Spark, ten times the rows would cross Arrow to the Python worker
    apply = store_tasks.apply_task(state.at, state.operator, state.stores.events, SUBTASK, ids, deltas, merged, PRESENT)
    applied = batch.mapInArrow(apply, StructType([*state.schema.fields, StructField(SUBTASK, IntegerType(), False)]))
    # where the metrics of ``carried`` are found once the job ran: the pinned RDD hides them from the job's own
    plan = wide._jdf.queryExecution() if carried else None
    return Applying(spark, state, ids, applied, deltas, f"apply-{state.operator}-{ids[0]}-{next(_observed)}",
                    carried, plan)


def chainable(ids: list[int], subtasks: frozenset[int] | None, into: KeyedState) -> bool:
    """Whether an apply can run inside the job of the aggregate ``into`` its changed rows feed (``planned``'s
    ``carried``): one epoch of a whole run (not a partial recovery), its tasks writing the deltas, and ``into``
    able to carry it (``KeyedState.carries_applies``)."""
    return len(ids) == 1 and subtasks is None and into.carries_applies


@dataclass
class Applying:
    """An aggregate's apply, planned (``planned``). ``rows``: its changed rows, for the next aggregate of a
    chain to plan on without running it (``chainable``); ``run``: its job, and the states after it."""

    spark: SparkSession
    state: StoreVersion
    ids: list[int]
    applied: DataFrame
    deltas: list[str] | None
    name: str
    carried: tuple[Applying, ...] = ()
    plan: object | None = None
    #: the states after each epoch, once its job ran (``run``, or the job that carried it)
    states: list[StoreVersion] | None = None

    @cached_property
    def observed(self) -> DataFrame:
        """The apply's rows, counted and checksummed per subtask as they pass (``group_metrics``)."""
        return self.applied.observe(self.name, *group_metrics(self.state.columns, SUBTASK, self.state.parallelism))

    @property
    def rows(self) -> DataFrame:
        """The changed rows of its one epoch, run by the job of the apply they feed (which carries this one)."""
        return self.observed.drop(SUBTASK)

    def run(self) -> list[StoreVersion]:
        """Run the job: this apply and the ones it carries, each chain link's states set after it."""
        state, ids, applied, deltas = self.state, self.ids, self.applied, self.deltas
        if deltas is None:  # the snapshot writer writes the deltas from these rows
            out = integrity_checked(lambda: applied.localCheckpoint(eager=True))
            loads = state.applied_loads()
            prevs = [state.version, *ids[:-1]]
            self.states = [replace(state, version=checkpoint_id, prev=prev, written=None, files=None, reload=False,
                                   loads=loads if k == 0 else {}, changes_of=cache(lambda c=checkpoint_id: (
                                       out if len(ids) == 1 else out.where(F.col("updated") == F.lit(c))).drop(
                                       SUBTASK)))
                           for k, (checkpoint_id, prev) in enumerate(zip(ids, prevs, strict=True))]
            return self.states
        # the apply runs inside the pass that counts and checksums its rows, and nothing keeps them: an epoch's
        # changes are the delta files it wrote. One epoch: observed as they pass (two aggregates per subtask,
        # no stage added); a catch-up's several: one aggregation (``metrics_by``), where observing would evaluate
        # a pair of conditional aggregates per epoch and subtask on every row
        if len(ids) > 1:
            found = integrity_checked(lambda: metrics_by(applied, state.columns, ["updated", SUBTASK]))
        else:
            observation = Observation(self.name)
            integrity_checked(lambda: applied.observe(observation, *group_metrics(
                state.columns, SUBTASK, state.parallelism)).write.format("noop").mode("overwrite").save())
            found = _by_subtask(observation.get, ids[0], state.parallelism)
        self._carried_done()
        return self._done(found)

    def _carried_done(self) -> None:
        """The states of the applies this job carried (and of theirs), their metrics read from the plans
        their rows ran in (``QueryExecution.observedMetrics``, each link's row crossing py4j as one JSON string)."""
        for link in self.carried:
            metrics = self.plan.observedMetrics().get(link.name)
            if metrics.isEmpty():
                raise RuntimeError(f"the job of {self.state.operator} ran the apply of {link.state.operator} "
                                   "without its metrics")
            link._done(_by_subtask(json.loads(metrics.get().json()), link.ids[0], link.state.parallelism))
            link._carried_done()

    def _done(self, found: dict[tuple[int, int], tuple[int, int | None]]) -> list[StoreVersion]:
        state, ids, deltas, p = self.state, self.ids, self.deltas, self.state.parallelism
        loads = state.applied_loads()
        prevs = [state.version, *ids[:-1]]
        states, last = [], state
        for k, (checkpoint_id, prev) in enumerate(zip(ids, prevs, strict=True)):
            mine = {}
            for i in range(p):
                mine[f"rows_{i}"], mine[f"xor_{i}"] = found.get((checkpoint_id, i), (0, None))
            changes = cache(partial(_delta_rows, self.spark, state, deltas[k],
                                    [i for i in range(p) if mine[f"rows_{i}"]]))
            written = {"uri": state_files.spark_uri(deltas[k]), "metrics": mine}
            files = last.after(checkpoint_id, deltas[k], {i: mine[f"rows_{i}"] for i in range(p)})
            last = replace(state, version=checkpoint_id, prev=prev, changes_of=changes, written=written, files=files,
                           reload=False, loads=loads if k == 0 else {})
            states.append(last)
        self.states = states
        return states


def _by_subtask(found: dict, checkpoint_id: int, parallelism: int) -> dict[tuple[int, int], tuple[int, int | None]]:
    """Observed metrics (``group_metrics``) of one epoch's apply, by (epoch, subtask) for the subtasks with rows."""
    return {(checkpoint_id, i): (found[f"rows_{i}"], found[f"xor_{i}"]) for i in range(parallelism)
            if found.get(f"rows_{i}")}


#: a number for each observed apply, its observation's name unique in the session (an epoch may run again)
_observed = itertools.count()
