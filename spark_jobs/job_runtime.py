"""A declared job (``absreplay.api``) as the operators the epoch runner calls.

``operators_of(job)`` returns what ``spark_jobs.operators.base`` describes: the
keyed state's schema and key, and ``step`` (state n-1 and epoch n's records ->
state n, rows changed by the epoch stamped ``updated = n``); for a job with an
iterate loop also ``loop_step`` and the back-edge's schema.

- stateless operators (map / filter / flat_map) are the user's DataFrame
  functions, applied in order to the epoch's records;
- a keyed aggregate is one union of the previous state and the records'
  contributions, then one aggregation per key: one shuffle, partial
  aggregation before it, no join;
- a keyed process function gets the state rows of the keys the epoch touches
  (a semi-join) with the records, and its new rows replace those keys';
- an iterate loop runs head and body round by round, each round materialized
  (localCheckpoint), until ``max_rounds`` or until nothing circulates.
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from coordinator.jobs import JobDefinition
from coordinator.types import Schema, ddl

_SPARK: dict[str, DataType] = {"string": StringType(), "long": LongType(), "int": IntegerType(),
                               "double": DoubleType(), "boolean": BooleanType(), "timestamp": TimestampType()}


def spark_type(name: str) -> DataType:
    if name.startswith("array<"):
        return ArrayType(spark_type(name[6:-1]), containsNull=False)
    return _SPARK[name]


def spark_schema(schema: Schema) -> StructType:
    return StructType([StructField(c, spark_type(t), False) for c, t in schema])


class DeclaredOperators:
    """An acyclic job's keyed operator and the stateless ones before it."""

    #: the operators read only ``line``: the runner may use its faster line reader
    needs_sequence_numbers = False

    def __init__(self, job: JobDefinition) -> None:
        self.spec = job.spec
        self.keyed = self.spec.keyed
        self.key = job.key
        self.state_schema = spark_schema(job.state_columns)
        self.columns = [c for c, _ in job.state_columns]
        self.sink_columns = tuple(dict.fromkeys(c for sink in job.sinks for c in sink.column_names))

    def stream(self, records: DataFrame) -> DataFrame:
        """The epoch's records through the stateless operators, in declared order."""
        for step in self.spec.steps:
            records = step.fn(records)
        return records

    def step(self, state: DataFrame, records: DataFrame, checkpoint_id: int) -> DataFrame:
        rows = self.stream(records)
        if self.keyed.kind == "aggregate":
            return self._aggregate(state, rows, checkpoint_id)
        return self._process(state, rows, checkpoint_id)

    def _aggregate(self, state: DataFrame, rows: DataFrame, checkpoint_id: int) -> DataFrame:
        contributions: list[Column] = [F.col(self.key).cast(spark_type(self.keyed.key_type)).alias(self.key)]
        merges: list[Column] = []
        means = []
        for name, agg in self.keyed.aggregates.items():
            for column, value, merge in _parts(name, agg):
                contributions.append(value.alias(column))
                merges.append(merge(F.col(column)).alias(column))
            if agg.kind == "mean":
                means.append(name)
        contributions.append(F.lit(checkpoint_id).cast("long").alias("updated"))
        merged = state.unionByName(rows.select(*contributions)).groupBy(self.key).agg(
            *merges, F.max("updated").alias("updated"))
        for name in means:
            merged = merged.withColumn(name, F.col(f"{name}__sum") / F.col(f"{name}__count"))
        return merged.select(*self.columns)

    def _process(self, state: DataFrame, rows: DataFrame, checkpoint_id: int) -> DataFrame:
        touched = rows.select(self.key).distinct()
        current = state.join(touched, self.key, "left_semi").drop("updated")
        values = [c for c in self.columns if c not in (self.key, "updated")]
        fresh = self.keyed.process(current, rows).select(
            F.col(self.key).cast(spark_type(self.keyed.key_type)).alias(self.key), *values,
            F.lit(checkpoint_id).cast("long").alias("updated"),
        ).localCheckpoint(eager=True)
        kept = state.join(fresh.select(self.key), self.key, "left_anti")
        return kept.unionByName(fresh.select(*self.columns))


def _parts(name: str, agg: Any) -> list[tuple[str, Column, Any]]:
    """(state column, a record's contribution, the aggregate that folds them) of one aggregate."""
    t = spark_type(agg.type)
    one = F.lit(1).cast("long")
    if agg.kind == "count":
        return [(name, one, F.sum)]
    if agg.kind == "mean":
        return [(f"{name}__sum", F.col(agg.column).cast("double"), F.sum), (f"{name}__count", one, F.sum),
                (name, F.lit(None).cast("double"), F.first)]
    if agg.kind == "combine":
        return [(name, agg.value().cast(t), agg.merge)]
    merge = {"sum": F.sum, "min": F.min, "max": F.max}[agg.kind]
    return [(name, F.col(agg.column).cast(t), merge)]


class DeclaredLoop(DeclaredOperators):
    """A job whose keyed operator is the head of an iterate loop."""

    def __init__(self, job: JobDefinition) -> None:
        super().__init__(job)
        loop = self.keyed.loop
        self.loop = loop
        self.back_edge_schema = spark_schema(tuple((c, ddl(t)) for c, t in loop.back_edge.items()))
        self.back_edge_key = loop.back_edge_key

    def loop_step(self, state: DataFrame, records: DataFrame, back_edge: DataFrame | None, checkpoint_id: int,
                  max_rounds: int | None) -> tuple[DataFrame, DataFrame]:
        inputs: DataFrame | None = self.stream(records)
        messages = back_edge
        rounds = 0
        while True:
            merged = self.loop.head(state, inputs, messages, checkpoint_id).localCheckpoint(eager=True)
            state = merged.select(*self.columns)
            # counted in the pass that materializes them: no extra job per round
            sent = Observation()
            messages = self.loop.body(merged).select(*self.back_edge_schema.fieldNames())
            messages = messages.observe(sent, F.count(F.lit(1)).alias("n")).localCheckpoint(eager=True)
            inputs, rounds = None, rounds + 1
            if (max_rounds is not None and rounds >= max_rounds) or not sent.get["n"]:
                return state, messages

    def step(self, state: DataFrame, records: DataFrame, checkpoint_id: int) -> DataFrame:
        """The epoch with the loop run to its fixpoint (what a stop-the-world snapshot would hold)."""
        return self.loop_step(state, records, None, checkpoint_id, None)[0]


_CACHE: dict[int, DeclaredOperators] = {}


def operators_of(job: JobDefinition) -> DeclaredOperators:
    """The operators of a declared job (one object per declaration)."""
    if job.spec is None:
        raise ValueError(f"job {job.name!r} has no declaration to run (absreplay.api.Job.definition())")
    key = id(job.spec)
    if key not in _CACHE:
        _ship_by_value(job.spec)
        _CACHE[key] = DeclaredLoop(job) if job.spec.keyed.loop is not None else DeclaredOperators(job)
    return _CACHE[key]


def _ship_by_value(spec: Any) -> None:
    """A job from the jobs folder is no package executors could import: its functions (a pandas
    UDF's, say) travel pickled by value instead."""
    from absreplay.job_discovery import FOLDER_PACKAGE
    from pyspark import cloudpickle

    for step in spec.steps:
        module = sys.modules.get(getattr(step.fn, "__module__", "") or "")
        if module is not None and module.__name__.startswith(FOLDER_PACKAGE + "."):
            cloudpickle.register_pickle_by_value(module)
