"""A declared job (``absreplay.api``) run one epoch at a time: every operator, in declared order.

``Dataflow.epoch`` takes every stateful operator's state n-1 and epoch n's
records of every source, and returns state n of each (rows changed by the
epoch stamped ``updated = n``), each sink's output, and each window's
watermark. The operators (``spark_jobs.operators.keyed_operators``):

- stateless map / filter / flat_map: the user's DataFrame functions;
- keyed aggregate: one union of the state and the records' contributions, then
  one aggregation per key (one shuffle, partial aggregation before it); emits
  the changed rows;
- keyed process function: the state rows of the keys the epoch touches with
  the records; its rows replace those keys'; emits them;
- event-time window, two-input join: ``spark_jobs.operators.keyed_operators``; session windows:
  ``spark_jobs.operators.session_windows``; interval join: ``spark_jobs.operators.interval_join``;
- iterate: head and body round by round, each round materialized, until
  ``max_rounds`` or until nothing circulates (the back-edge log).

An aggregate's or process function's state TTL (``spark_jobs.operators.ttl``) turns the keys whose TTL is
over into tombstones in the same materialization.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from collections.abc import Callable
from functools import cache, cached_property, reduce
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from coordinator.dataflow.jobs import JobDefinition, StateSpec
from coordinator.types import ddl
from coordinator.dataflow.graph import STATELESS_KINDS, OperatorKind
from spark_jobs.operators import keyed_operators as ko
from spark_jobs.operators import interval_join, session_windows, ttl
from spark_jobs.records.epoch_source import keeps_input_file
from spark_jobs.records.record_parsing import record_schema
from spark_jobs.records.spark_types import spark_schema
from spark_jobs.state.backend import EPOCH, EpochStep, KeyedState, PlannedApply, tagged
from spark_jobs.state.frames.frame_state import FrameState


@dataclass
class EpochOutput:
    states: dict[str, KeyedState]
    #: sink name -> the epoch's output (sinks fed by a keyed operator's state read its snapshot instead)
    outputs: dict[str, DataFrame] = field(default_factory=dict)
    back_edge: DataFrame | None = None
    watermarks: dict[str, int | None] = field(default_factory=dict)


class Dataflow:
    def __init__(self, job: JobDefinition) -> None:
        self.job = job
        self.spec = job.spec
        self.nodes = {n.name: n for n in self.spec.nodes}
        self.loop = next((n for n in self.spec.nodes if n.kind is OperatorKind.ITERATE), None)
        #: operator -> the operators reading its output
        self._readers = {n.name: [m.name for m in self.spec.nodes if n.name in m.inputs] for n in self.spec.nodes}
        self._schemas: dict[str, StructType] = {}
        #: the newest checkpoint whose snapshot is durable, set by the runner before each epoch: tombstones at or
        #: below it leave the state (``spark_jobs.operators.deletes``); None: none is, they stay
        self.durable: int | None = None
        #: state TTL (``spark_jobs.operators.ttl``): the lineage the next epoch starts from, set by the runner
        #: and by verify; each epoch's keys dropped
        self.expiry = ttl.Expiry()

    # -- what the runner asks -----------------------------------------------------------------------
    @property
    def is_iterative(self) -> bool:
        return self.loop is not None

    @property
    def needs_sequence_numbers(self) -> bool:
        """Windows and joins keep records' source positions (dead letters, a buffered record's identity);
        structured formats parse every line; the others read plain lines, faster."""
        return any(n.kind in (OperatorKind.WINDOW, OperatorKind.JOIN, OperatorKind.INTERVAL_JOIN)
                   for n in self.spec.nodes)

    @cached_property
    def back_edge_schema(self) -> StructType:
        return spark_schema(tuple((c, ddl(t)) for c, t in self.loop.loop.back_edge.items()))

    @property
    def back_edge_key(self) -> str:
        return self.loop.loop.back_edge_key

    def state_schema(self, spark: SparkSession, operator: str) -> StructType:
        spec = self.job.state(operator)
        if spec.columns is not None:
            return spark_schema(spec.columns)
        if operator not in self._schemas:
            self._dry_run(spark)
        return self._schemas[operator]

    def empty_state(self, spark: SparkSession, operator: str) -> DataFrame:
        return spark.createDataFrame([], self.state_schema(spark, operator))

    def _dry_run(self, spark: SparkSession) -> None:
        """Every operator's output schema from empty inputs (Spark analysis only, no job runs): what a
        join's state holds depends on the user's functions before it."""
        empty = {name: spark.createDataFrame([], record_schema(fmt, self.needs_sequence_numbers))
                 for name, fmt in self.job.sources}
        # no state yet, only schemas: a join's is None until its inputs' are known
        states = {st.operator: FrameState(st.operator, None if st.columns is None else spark.createDataFrame(
            [], spark_schema(st.columns))) for st in self.job.states}
        self.epoch(spark, states, empty, None, {}, 0, 1, dry=True)

    # -- several epochs at once ---------------------------------------------------------------------
    def fusable(self, states: dict[str, KeyedState]) -> bool:
        """Whether epochs can run together (``epochs``): the job keeps state, every stateful operator's engine
        folds several epochs at once (``KeyedState.folds_epochs_together``) and its records come from the
        sources through stateless operators alone (what it emits may feed only stateless operators and sinks),
        and there is no loop."""
        return self.loop is None and bool(self.job.states) and all(
            states[st.operator].folds_epochs_together and self._stateless(self.nodes[st.operator].inputs[0])
            for st in self.job.states)

    def _stateless(self, name: str) -> bool:
        node = self.nodes[name]
        return node.kind is OperatorKind.SOURCE or (node.kind in STATELESS_KINDS and self._stateless(node.inputs[0]))

    def epochs(self, spark: SparkSession, states: dict[str, KeyedState], records: list[tuple[int, dict]],
               watermarks: dict[str, int | None], together: tuple[dict, Column, frozenset[str]] | None = None,
               volume: int | None = None) -> list[EpochOutput]:
        """Epochs ``(checkpoint id, records)`` of a ``fusable`` job, in order: each keyed aggregate folds all
        of them in one Spark job (``stores.apply.aggregate``: its cost is one job's, not one per epoch),
        then each epoch's outputs are what ``epoch`` gives (``KeyedState.apply_epochs``). ``together``: the same
        records read in one
        scan, the column giving each its epoch and the files scanned (``epoch_source.epoch_of_file``), used
        where the stream into an aggregate is computed row by row from them (``epoch_source.keeps_input_file``);
        ``volume``: their source records (``stores.apply.aggregate`` plans by it)."""
        ids = [c for c, _ in records]
        applied = {}
        for st in self.job.states:
            node = self.nodes[st.operator]
            rows = None
            if together is not None:
                stream = self.stream_of(spark, node.inputs[0], together[0])
                if keeps_input_file(stream, together[2]):
                    rows = stream.withColumn(EPOCH, together[1])
            if rows is None:
                rows = reduce(DataFrame.unionByName, [
                    tagged(self.stream_of(spark, node.inputs[0], r), c) for c, r in records])
            applied[st.operator] = states[st.operator].apply_epochs(spark, node, ids, rows, volume)
        return [self.epoch(spark, states, r, None, watermarks, c, None, applied={op: a[k] for op, a in applied.items()})
                for k, (c, r) in enumerate(records)]

    # -- one epoch ----------------------------------------------------------------------------------
    def epoch(self, spark: SparkSession, states: dict[str, KeyedState], records: dict[str, DataFrame],
              back_edge: DataFrame | None, watermarks: dict[str, int | None], checkpoint_id: int,
              max_rounds: int | None, dry: bool = False, subtasks: frozenset[int] | None = None,
              applied: dict[str, KeyedState] | None = None, volume: int | None = None) -> EpochOutput:
        """``states``: each stateful operator's, in its engine (``spark_jobs.state.backend``); ``subtasks``: a
        partial recovery's subtasks behind the epoch (engines that apply per subtask take only their records;
        the runner merges the others, ``KeyedState.keep_past``); ``applied``: the states after this epoch,
        applied already (``epochs``); ``volume``: its source records (``epochs``)."""
        # a stream is planned when something reads it: a catch-up's aggregates have read their records already
        streams: dict[str, Callable[[], DataFrame]] = {}
        out = EpochOutput(states={})
        # applies planned to run in the job of the operator their changes feed: that one, and it
        chained: dict[str, tuple[str, PlannedApply]] = {}
        for node in self.spec.nodes:
            ins = [streams[i] for i in node.inputs]
            if node.kind is OperatorKind.SOURCE:
                streams[node.name] = cache(lambda name=node.name: records[name])
            elif node.kind in STATELESS_KINDS:
                streams[node.name] = cache(lambda fn=node.fn, into=ins[0]: fn(into()))
            elif node.kind is OperatorKind.SINK:
                spec = next(s for s in self.job.sinks if s.name == node.name)
                if not spec.from_state:
                    cols = [c for c, _ in spec.columns]
                    out.outputs[node.name] = ins[0]().select(*cols)
            elif applied:
                new_state = out.states[node.name] = applied[node.name]
                streams[node.name] = cache(lambda applied=new_state: applied.emitted)
            else:
                spec = self.job.state(node.name)
                step = EpochStep(
                    spark, node, checkpoint_id, ins[0],
                    lambda frame, node=node, spec=spec, ins=ins: self._keyed(
                        spark, node, spec, frame, [i() for i in ins], back_edge, watermarks, out, checkpoint_id,
                        max_rounds, dry),
                    subtasks, volume, tuple(a for into, a in chained.values() if into == node.name))
                into = self._chained_into(node.name, states)
                planned = None if into is None else states[node.name].chained(step, states[into])
                if planned is not None:  # its state: once the job of ``into`` ran
                    chained[node.name] = (into, planned)
                    streams[node.name] = cache(lambda planned=planned: planned.rows)
                    continue
                new_state = out.states[node.name] = states[node.name].apply(step)
                streams[node.name] = cache(lambda applied=new_state: applied.emitted)
                if dry:
                    self._schemas[node.name] = new_state.rows(spark).schema
        for name, (_, planned) in chained.items():
            if planned.states is None:
                raise RuntimeError(f"the apply of {name} was planned into a job that did not run")
            out.states[name] = planned.states[0]
        return out

    def _chained_into(self, name: str, states: dict[str, KeyedState]) -> str | None:
        """The operator that alone reads operator ``name``'s changes, through stateless operators alone, when its
        engine can run ``name``'s apply in its own job (``KeyedState.carries_applies``): nothing else reads them
        (no sink, no other operator). None when there is none."""
        following = self._readers[name]
        while len(following) == 1:
            node = self.nodes[following[0]]
            if node.kind not in STATELESS_KINDS:
                return node.name if node.name in states and states[node.name].carries_applies else None
            following = self._readers[node.name]
        return None

    def _keyed(self, spark: SparkSession, node: Any, spec: StateSpec, state: DataFrame | None,
               ins: list[DataFrame], back_edge: DataFrame | None, watermarks: dict[str, int | None],
               out: EpochOutput, checkpoint_id: int, max_rounds: int | None,
               dry: bool) -> tuple[DataFrame, DataFrame]:
        columns = None if spec.columns is None else [c for c, _ in spec.columns]
        if node.kind in (OperatorKind.AGGREGATE, OperatorKind.PROCESS):
            if node.kind is OperatorKind.AGGREGATE:
                new = ttl.aggregate(state, ins[0], node, columns, checkpoint_id, self.durable) if ttl.has(
                    node) else ko.aggregate(state, ins[0], node, columns, checkpoint_id)
            else:
                new = (ttl.process if ttl.event_ttl(node) else ko.process)(state, ins[0], node, columns,
                                                                          checkpoint_id, dry, self.durable)
            new = self.expiry.expire(new, node, columns, checkpoint_id, self.job.parallelism, dry,
                                     watermarks.get(node.name))
            # materialized once: its snapshot and every operator downstream read this copy
            new = ko.materialized(new, dry)
            if ttl.event_ttl(node) is not None and not dry:  # an event-time TTL's watermark, acked with the state
                out.watermarks[node.name] = self.expiry.watermark(node, watermarks.get(node.name))
            return new, new.where(F.col("updated") == F.lit(checkpoint_id))
        if node.kind is OperatorKind.WINDOW:
            windows = session_windows.session if session_windows.is_session(node) else ko.window
            new, emitted, late, mark = windows(state, ins[0], node, columns, watermarks.get(node.name),
                                               checkpoint_id, dry)
            out.watermarks[node.name] = mark
            out.outputs[f"{node.name}_late"] = late
            return ko.materialized(new, dry), emitted
        if node.kind is OperatorKind.JOIN:
            new, matched = ko.join(state, ins[0], ins[1], node, checkpoint_id, dry)
            return ko.materialized(new, dry), matched
        if node.kind is OperatorKind.INTERVAL_JOIN:  # spark_jobs.operators.interval_join (a restore reads its watermark
            # from its state): a state n it returns is an immutable copy already
            new, joined, late, out.watermarks[node.name] = interval_join.epoch(state, ins[0], ins[1], node,
                                                                               checkpoint_id, dry, watermarks)
            out.outputs[f"{node.name}_late"] = late
            return new, joined
        new, out.back_edge = self._loop(spark, state, ins[0], back_edge, checkpoint_id, max_rounds, dry)
        return new, new.where(F.col("updated") == F.lit(checkpoint_id))

    def _loop(self, spark: SparkSession, state: DataFrame, records: DataFrame, back_edge: DataFrame | None,
              checkpoint_id: int, max_rounds: int | None, dry: bool = False) -> tuple[DataFrame, DataFrame]:
        """The loop's rounds until ``max_rounds`` or until nothing circulates; ``dry``: one round,
        planned only (no Spark job)."""
        loop = self.loop.loop
        columns = [c for c, _ in self.job.state(self.loop.name).columns]
        inputs: DataFrame | None = records
        messages = back_edge
        rounds = 0
        while True:
            merged = ko.materialized(loop.head(state, inputs, messages, checkpoint_id), dry)
            state = merged.select(*columns)
            messages = loop.body(merged).select(*self.back_edge_schema.fieldNames())
            if dry:
                return state, messages
            # counted in the pass that materializes them: no extra job per round
            sent = Observation()
            messages = messages.observe(sent, F.count(F.lit(1)).alias("n")).localCheckpoint(eager=True)
            inputs, rounds = None, rounds + 1
            if (max_rounds is not None and rounds >= max_rounds) or not sent.get["n"]:
                return state, messages

    def quiesce(self, spark: SparkSession, state: DataFrame, back_edge: DataFrame, checkpoint_id: int) -> DataFrame:
        """State n with back-edge log n fed back and the loop run until nothing circulates, no new input:
        what a checkpoint of a job with a loop means (what it converges to before any new record)."""
        no_records = self.stream_of(spark, self.loop.inputs[0],
                                    {n: spark.createDataFrame([], record_schema(f, self.needs_sequence_numbers))
                                     for n, f in self.job.sources})
        return self._loop(spark, state, no_records, back_edge, checkpoint_id, None)[0]

    def stream_of(self, spark: SparkSession, name: str, records: dict[str, DataFrame]) -> DataFrame:
        """The stateless stream ``name`` (a source or a chain of stateless operators) over ``records``."""
        node = self.nodes[name]
        if node.kind is OperatorKind.SOURCE:
            return records[name]
        return node.fn(self.stream_of(spark, node.inputs[0], records))


_CACHE: dict[int, Dataflow] = {}


def dataflow_of(job: JobDefinition) -> Dataflow:
    """The runtime of a declared job (one per declaration)."""
    if job.spec is None:
        raise ValueError(f"job {job.name!r} has no declaration to run (absreplay.api.Job.definition())")
    key = id(job.spec)
    if key not in _CACHE:
        _ship_by_value(job.spec)
        _CACHE[key] = Dataflow(job)
    return _CACHE[key]


def _ship_by_value(spec: Any) -> None:
    """A job from the jobs folder is no package executors could import: its functions (a pandas
    UDF's, say) travel pickled by value instead."""
    from pyspark import cloudpickle

    from coordinator.dataflow.discovery import FOLDER_PACKAGE

    for node in spec.nodes:
        module = sys.modules.get(getattr(node.fn, "__module__", "") or "")
        if module is not None and module.__name__.startswith(FOLDER_PACKAGE + "."):
            cloudpickle.register_pickle_by_value(module)
