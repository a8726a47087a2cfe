"""The public API: declare a job, and get barriers, snapshots, recovery, rewind, verify, DAGs and the audit.

    import absreplay.api as abs

    job = abs.Job("wordcount", parallelism=2)
    (job.source("source", abs.TextLines())
        .flat_map("tokenize", tokenize)            # DataFrame -> DataFrame
        .key_by("word", str)
        .aggregate("count", count=abs.count())     # keyed state, snapshotted every checkpoint
        .sink("sink", abs.SqlTable("wordcount_counts")))

A job file (a module of an installed package named in the ``absreplay.jobs``
entry-point group, or a ``*.py`` file in ``$ABS_JOBS_DIR``) holds ``Job``
objects at module level. Operators are DataFrame-level functions (Spark SQL,
Arrow/pandas UDFs), called once per epoch with the epoch's records, never per
record. Nothing here imports Spark: a declaration is read by the command line
and the DAGs without a JVM; ``spark_jobs.job_runtime`` runs it.

Types are Python types (``str``, ``int`` (64-bit), ``float``, ``bool``,
``list[int]``) or Spark DDL names (``"string"``, ``"array<long>"``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.graph import Edge, JobGraph, Operator, OperatorKind, Partitioning
from coordinator.iterate import LoopStep, check_loop, iterate
from coordinator.jobs import JobDefinition, SinkSpec
from coordinator.policy import CheckpointPolicy, IdStorePolicy
from coordinator.record_formats import LineCheck, TextLines
from coordinator.sinks.declarations import DeltaTable, ParquetDirectory, SinkDeclaration, SqlTable
from coordinator.types import Schema, ddl

__all__ = [
    "Aggregate", "CheckpointPolicy", "DeltaTable", "IdStorePolicy", "Job", "KeyedStream", "LineCheck", "Loop",
    "ParquetDirectory", "SqlTable", "Stream", "TextLines", "combine", "count", "max", "mean", "min", "sum",
]

Transform = Callable[[Any], Any]  # DataFrame -> DataFrame


# -- keyed aggregates -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Aggregate:
    """A per-key aggregate: ``value(records)`` gives each record's contribution (a Column) and
    ``merge`` (a Spark aggregate function, associative and commutative: sum, min, max, ...) folds
    contributions and the stored value together, so the previous state and the epoch's records
    are aggregated in one shuffle. ``column``: the input column, when the value reads one."""

    kind: str
    type: str
    column: str | None = None
    value: Callable[[], Any] | None = None
    merge: Callable[[Any], Any] | None = None


def count() -> Aggregate:
    return Aggregate("count", "long")


def sum(column: str, type: type | str = int) -> Aggregate:  # noqa: A001 - the aggregate's name
    return Aggregate("sum", ddl(type), column)


def min(column: str, type: type | str = int) -> Aggregate:  # noqa: A001
    return Aggregate("min", ddl(type), column)


def max(column: str, type: type | str = int) -> Aggregate:  # noqa: A001
    return Aggregate("max", ddl(type), column)


def mean(column: str) -> Aggregate:
    """Kept as sum and count (two hidden state columns); the sink sees the mean, a double."""
    return Aggregate("mean", "double", column)


def combine(value: Callable[[], Any], merge: Callable[[Any], Any], type: type | str) -> Aggregate:
    """A user-defined combiner: ``value()`` returns a Column over the epoch's records, ``merge`` an
    aggregate function of a Column (e.g. ``lambda c: F.bit_or(c)``)."""
    return Aggregate("combine", ddl(type), None, value, merge)


# -- iterate ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Loop:
    """An iterate loop (DESIGN.md section 3, "Cycles") whose head keeps keyed state.

    Each round: ``head(state, records, messages, checkpoint_id)`` returns the new state with a
    boolean ``active`` column (``records``: the epoch's input on the first round, None later;
    ``messages``: what came back on the back-edge, None when nothing did); ``body(head_output)``
    turns it into messages (``back_edge`` schema, keyed by ``back_edge_key``) that the tail
    returns to the head. At most ``rounds`` rounds run per epoch; what still circulates then is the
    back-edge log, part of the checkpoint, and the first input of the next epoch."""

    head: Callable[..., Any]
    body: Callable[[Any], Any]
    back_edge: dict[str, type | str]
    back_edge_key: str
    rounds: int = 4
    body_name: str = "propagate"
    tail_name: str = "feedback"


# -- streams ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One operator of the declared pipeline, in order."""

    name: str
    kind: str
    fn: Transform | None = None


@dataclass
class Keyed:
    """The job's keyed stateful operator: its key, state and what each epoch does to it."""

    name: str
    key: str
    key_type: str
    kind: str  # "aggregate" | "process" | "iterate"
    aggregates: dict[str, Aggregate] = field(default_factory=dict)
    state: Schema = ()
    process: Callable[..., Any] | None = None
    loop: Loop | None = None

    @property
    def columns(self) -> Schema:
        """The state's columns, the key first and ``updated`` last (mean keeps a hidden sum and count)."""
        values: list[tuple[str, str]] = []
        for name, agg in self.aggregates.items():
            if agg.kind == "mean":
                values += [(hidden(name, "sum"), "double"), (hidden(name, "count"), "long")]
            values.append((name, agg.type))
        return ((self.key, self.key_type), *values, *self.state, ("updated", "long"))

    @property
    def visible(self) -> Schema:
        return tuple((c, t) for c, t in self.columns if "__" not in c and c != "updated")


def hidden(name: str, part: str) -> str:
    return f"{name}__{part}"


class Stream:
    """The records after the operators declared so far (one DataFrame per epoch)."""

    def __init__(self, job: Job) -> None:
        self._job = job

    def _add(self, name: str, kind: str, fn: Transform) -> Stream:
        self._job._require_open(name)
        self._job.steps.append(Step(name, kind, fn))
        return self

    def map(self, name: str, fn: Transform) -> Stream:
        return self._add(name, "map", fn)

    def filter(self, name: str, fn: Transform) -> Stream:
        """``fn(df)`` returns the records to keep (e.g. ``lambda df: df.where(...)``)."""
        return self._add(name, "filter", fn)

    def flat_map(self, name: str, fn: Transform) -> Stream:
        return self._add(name, "flat_map", fn)

    def key_by(self, key: str, type: type | str) -> KeyedStream:
        return KeyedStream(self._job, key, ddl(type))


class KeyedStream:
    def __init__(self, job: Job, key: str, key_type: str) -> None:
        self._job, self._key, self._type = job, key, key_type

    def _keyed(self, keyed: Keyed) -> Output:
        self._job._require_open(keyed.name)
        if self._job.keyed is not None:
            raise ValueError(f"job {self._job.name!r}: one keyed operator per job for now "
                             f"({self._job.keyed.name!r} is declared already)")
        self._job.keyed = keyed
        return Output(self._job)

    def aggregate(self, name: str, **aggregates: Aggregate) -> Output:
        """Per key, the named aggregates over every record so far (the state: one row per key)."""
        if not aggregates:
            raise ValueError(f"operator {name!r}: name at least one aggregate, e.g. count=abs.count()")
        return self._keyed(Keyed(name, self._key, self._type, "aggregate", aggregates=dict(aggregates)))

    def process(self, name: str, fn: Callable[..., Any], state: dict[str, type | str]) -> Output:
        """Keyed process function, epoch-batched: ``fn(state, records)`` gets the state rows of the
        keys the epoch's records touch and those records, and returns the new state rows (key and
        ``state`` columns) of the keys whose state changed; other keys keep theirs."""
        return self._keyed(Keyed(name, self._key, self._type, "process",
                                 state=tuple((c, ddl(t)) for c, t in state.items()), process=fn))

    def iterate(self, name: str, loop: Loop, state: dict[str, type | str]) -> Output:
        return self._keyed(Keyed(name, self._key, self._type, "iterate",
                                 state=tuple((c, ddl(t)) for c, t in state.items()), loop=loop))


class Output:
    """A keyed operator's result: each checkpoint's changed keys go to the sinks."""

    def __init__(self, job: Job) -> None:
        self._job = job

    def sink(self, name: str, target: SinkDeclaration, columns: tuple[str, ...] | None = None) -> Output:
        """Send each checkpoint's changed rows (key first; ``columns``: which of the state's, by
        default all but hidden ones) to ``target``, two-phase: committed when the checkpoint is."""
        self._job._require_open(name)
        self._job.sinks.append((name, target, columns))
        return self


# -- the job ----------------------------------------------------------------------------------------
@dataclass
class Job:
    name: str
    description: str = ""
    parallelism: int = 2
    barrier_interval_minutes: int = 5
    policy: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    id_store: IdStorePolicy = field(default_factory=IdStorePolicy)
    source_name: str = ""
    lines: TextLines = field(default_factory=TextLines)
    steps: list[Step] = field(default_factory=list)
    keyed: Keyed | None = None
    sinks: list[tuple[str, SinkDeclaration, tuple[str, ...] | None]] = field(default_factory=list)

    def source(self, name: str, lines: TextLines | None = None) -> Stream:
        """The job's source: segment files injected into ``$ABS_DATA_DIR/<job>/input/<partition>/``,
        one text line a record (``lines`` says which lines are records; the others become dead
        letters at inject, with their reason)."""
        if self.source_name:
            raise ValueError(f"job {self.name!r}: one source per job for now ({self.source_name!r} is declared)")
        self._require_open(name)
        self.source_name, self.lines = name, lines or TextLines()
        return Stream(self)

    def definition(self, origin: str = "") -> JobDefinition:
        """What the checkpoint lifecycle knows of this job (``coordinator.jobs``); ValueError naming
        what is missing when the declaration is incomplete."""
        if not self.source_name:
            raise ValueError(f"job {self.name!r} declares no source: job.source(name, abs.TextLines())")
        if self.keyed is None:
            raise ValueError(f"job {self.name!r} declares no keyed operator: .key_by(key, type).aggregate(...)")
        if not self.sinks:
            raise ValueError(f"job {self.name!r} declares no sink: .sink(name, abs.SqlTable(table))")
        p, keyed = self.parallelism, self.keyed
        kinds = {"map": OperatorKind.MAP, "filter": OperatorKind.FILTER, "flat_map": OperatorKind.FLAT_MAP}
        chain = [Operator(self.source_name, OperatorKind.SOURCE, p),
                 *(Operator(step.name, kinds[step.kind], p) for step in self.steps)]
        edges = [Edge(a.name, b.name, Partitioning.FORWARD) for a, b in zip(chain, chain[1:])]
        sinks = [Operator(name, OperatorKind.SINK, p) for name, _, _ in self.sinks]
        if keyed.loop is None:
            kind = OperatorKind.KEYED_REDUCE if keyed.kind == "aggregate" else OperatorKind.STATEFUL_MAP
            operators = [*chain, Operator(keyed.name, kind, p), *sinks]
            loop_edges: list[Edge] = []
        else:
            loop = iterate(
                head=Operator(keyed.name, OperatorKind.ITERATE_HEAD, p),
                body=[LoopStep(Operator(keyed.loop.body_name, OperatorKind.FLAT_MAP, p), Partitioning.FORWARD)],
                tail=LoopStep(Operator(keyed.loop.tail_name, OperatorKind.ITERATE_TAIL, p), Partitioning.HASH),
                feedback=Partitioning.FORWARD,
            )
            operators, loop_edges = [*chain, *loop.operators, *sinks], list(loop.edges)
        edges += [Edge(chain[-1].name, keyed.name, Partitioning.HASH), *loop_edges,
                  *(Edge(keyed.name, op.name, Partitioning.FORWARD) for op in sinks)]
        graph = JobGraph(operators=tuple(operators), edges=tuple(edges))
        if keyed.loop is not None:
            check_loop(graph, loop)
        types = dict(keyed.columns)
        specs = []
        for name, target, columns in self.sinks:
            chosen = columns or tuple(c for c, _ in keyed.visible)
            unknown = [c for c in chosen if c not in types]
            if unknown or chosen[0] != keyed.key:
                raise ValueError(f"job {self.name!r}, sink {name!r}: columns must start with the key "
                                 f"{keyed.key!r} and be among {', '.join(c for c, _ in keyed.visible)}")
            specs.append(SinkSpec(name, target, tuple((c, types[c]) for c in chosen), keyed.key))
        return JobDefinition(
            name=self.name, description=self.description, graph=graph, state_operator=keyed.name,
            key=keyed.key, state_columns=keyed.columns, sinks=tuple(specs), policy=self.policy,
            barrier_interval_minutes=self.barrier_interval_minutes, id_store=self.id_store, lines=self.lines,
            loop_rounds=keyed.loop.rounds if keyed.loop else 4, spec=self, origin=origin,
        )

    def names(self) -> list[str]:
        return [n for n in (self.source_name, *(s.name for s in self.steps),
                            self.keyed.name if self.keyed else "", *(s[0] for s in self.sinks)) if n]

    def _require_open(self, name: str) -> None:
        if not name or not name.replace("_", "").isalnum():
            raise ValueError(f"job {self.name!r}: operator name {name!r} must be letters, digits and underscores")
        if name in self.names():
            raise ValueError(f"job {self.name!r}: two operators are named {name!r}")
