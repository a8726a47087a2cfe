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
and the DAGs without a JVM; ``spark_jobs.dataflow`` runs it.

Streams are appends (records) or upserts (a keyed operator's changed rows, one
per key). Every keyed operator keeps its own state, snapshotted and restored on
its own; a sink takes one stream, two-phase, exactly once.

Types are Python types (``str``, ``int`` (64-bit), ``float``, ``bool``,
``list[int]``) or Spark DDL names (``"string"``, ``"array<long>"``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from absreplay.job_graph import build_definition, late_sink_name
from coordinator.checkpoints.policy import CheckpointPolicy, IdStorePolicy
from coordinator.dataflow.jobs import JobDefinition, check_dead_letter_share, check_name
from coordinator.sinks.declarations import DeltaTable, ParquetDirectory, SinkDeclaration, SqlTable
from coordinator.sources.record_formats import Csv, JsonLines, LineCheck, ParquetFiles, RecordFormat, TextLines
from coordinator.types import Schema, ddl

__all__ = [
    "Aggregate", "CheckpointPolicy", "Csv", "DeltaTable", "IdStorePolicy", "Job", "JsonLines", "KeyedStream",
    "LineCheck", "Loop", "ParquetDirectory", "Sliding", "SqlTable", "Stream", "TextLines", "Tumbling", "combine",
    "count", "json_lines", "csv", "max", "mean", "min", "parquet", "sum",
]

Transform = Callable[[Any], Any]  # DataFrame -> DataFrame
Types = dict[str, "type | str"]


def _schema(fields: Types) -> Schema:
    return tuple((c, ddl(t)) for c, t in fields.items())


def json_lines(fields: Types, time: str | None = None, id: str | None = None) -> JsonLines:  # noqa: A002
    """JSON objects, one a line, with these fields; ``time``: the event-time field (epoch ms); ``id``: the
    records' id field: a record whose id was seen already is a dead letter (exactly once for sources
    that resend)."""
    return JsonLines(_schema(fields), time, id)


def csv(fields: Types, time: str | None = None, delimiter: str = ",") -> Csv:
    return Csv(_schema(fields), time, delimiter)


def parquet(fields: Types, time: str | None = None) -> ParquetFiles:
    """Parquet segment files, one record a row, with these columns (others are not read)."""
    return ParquetFiles(_schema(fields), time)


# -- keyed aggregates -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Aggregate:
    """A per-key aggregate: each record contributes a value (a Column over the record) that
    ``merge`` (a Spark aggregate function, associative and commutative: sum, min, max, ...) folds
    with the stored value, so the previous state and the epoch's records are aggregated in one
    shuffle. ``column``: the input column, when the contribution reads one."""

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
    """Kept as sum and count (two hidden state columns); the output is the mean, a double."""
    return Aggregate("mean", "double", column)


def combine(value: Callable[[], Any], merge: Callable[[Any], Any], type: type | str) -> Aggregate:
    """A user-defined combiner: ``value()`` returns a Column over a record, ``merge`` an aggregate
    function of a Column (e.g. ``lambda c: F.bit_or(c)``)."""
    return Aggregate("combine", ddl(type), None, value, merge)


# -- iterate and windows ----------------------------------------------------------------------------
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
    back_edge: Types
    back_edge_key: str
    rounds: int = 4
    body_name: str = "propagate"
    tail_name: str = "feedback"


@dataclass(frozen=True)
class Tumbling:
    """Event-time windows of ``minutes`` (or ``ms``), one after the other."""

    minutes: float = 0
    ms: int = 0

    @property
    def size_ms(self) -> int:
        return self.ms or int(self.minutes * 60_000)

    @property
    def slide_ms(self) -> int:
        return self.size_ms


@dataclass(frozen=True)
class Sliding:
    """Event-time windows of ``size_ms`` starting every ``slide_ms`` (a record is in several)."""

    size_ms: int
    slide_ms: int


# -- the declaration --------------------------------------------------------------------------------
@dataclass
class Node:
    """One operator of the declared graph."""

    name: str
    kind: str  # source | map | filter | flat_map | aggregate | process | iterate | window | join | sink
    inputs: tuple[str, ...] = ()
    fn: Transform | None = None
    key: Schema = ()
    aggregates: dict[str, Aggregate] = field(default_factory=dict)
    state: Schema = ()
    loop: Loop | None = None
    format: RecordFormat | None = None
    window: Tumbling | Sliding | None = None
    time: str = ""
    delay_ms: int = 0
    lateness_ms: int = 0
    target: SinkDeclaration | None = None
    columns: Schema | None = None
    #: a join: the other input's key columns, in the order of this one's
    other_key: Schema = ()

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.key)


def _declared_names(node: Node) -> list[tuple[str, str]]:
    """Each name the node brings into the graph, with what it is declared as: a window's late-record
    sink and a loop's body and tail are operators of their own, kept in the catalog like any."""
    names = [(node.name, node.kind if node.kind in ("source", "sink") else "operator")]
    if node.kind == "window":
        names.append((late_sink_name(node.name), f"window {node.name!r}: late-record sink"))
    if node.loop is not None:
        names += [(node.loop.body_name, "loop body"), (node.loop.tail_name, "loop tail")]
    return names


class Stream:
    """The records an operator emits each epoch (one DataFrame per epoch)."""

    def __init__(self, job: Job, node: str) -> None:
        self._job, self._node = job, node

    def _then(self, node: Node) -> Stream:
        self._job._add(node)
        return Stream(self._job, node.name)

    def map(self, name: str, fn: Transform) -> Stream:
        return self._then(Node(name, "map", (self._node,), fn))

    def filter(self, name: str, fn: Transform) -> Stream:
        """``fn(df)`` returns the records to keep (e.g. ``lambda df: df.where(...)``)."""
        return self._then(Node(name, "filter", (self._node,), fn))

    def flat_map(self, name: str, fn: Transform) -> Stream:
        return self._then(Node(name, "flat_map", (self._node,), fn))

    def key_by(self, key: str | dict[str, type | str], type: type | str | None = None) -> KeyedStream:
        """Partition by ``key`` (a column and its type, or several: ``{"country": str, "page": str}``)."""
        fields = {key: type} if isinstance(key, str) else dict(key)
        if any(t is None for t in fields.values()):
            raise ValueError(f"key_by({key!r}): give the key's type, e.g. key_by('word', str)")
        return KeyedStream(self._job, self._node, _schema(fields))

    def sink(self, name: str, target: SinkDeclaration, columns: tuple[str, ...] | Types | None = None) -> Stream:
        """Send the stream to ``target``, two-phase: each checkpoint's records are committed when the
        checkpoint is. A keyed operator's output upserts by its key; other streams append.
        ``columns``: which columns (default: all of a keyed operator's output; a stream of records
        must name its columns with their types)."""
        if isinstance(columns, dict):
            columns = _schema(columns)
        elif columns is not None:
            columns = tuple((c, "") for c in columns)
        self._job._add(Node(name, "sink", (self._node,), target=target, columns=columns))
        return self


class KeyedStream:
    def __init__(self, job: Job, node: str, key: Schema) -> None:
        self._job, self._node, self._key = job, node, key

    def _keyed(self, node: Node) -> Stream:
        node.inputs, node.key = (self._node, *node.inputs), self._key
        self._job._add(node)
        return Stream(self._job, node.name)

    def aggregate(self, name: str, **aggregates: Aggregate) -> Stream:
        """Per key, the named aggregates over every record so far; emits the changed keys' rows."""
        if not aggregates:
            raise ValueError(f"operator {name!r}: name at least one aggregate, e.g. count=abs.count()")
        return self._keyed(Node(name, "aggregate", aggregates=dict(aggregates)))

    def process(self, name: str, fn: Callable[..., Any], state: Types) -> Stream:
        """Keyed process function, epoch-batched: ``fn(state, records)`` gets the state rows of the
        keys the epoch's records touch and those records, and returns the new state rows (key and
        ``state`` columns) of the keys whose state changed; other keys keep theirs. Emits them."""
        return self._keyed(Node(name, "process", fn=fn, state=_schema(state)))

    def iterate(self, name: str, loop: Loop, state: Types) -> Stream:
        return self._keyed(Node(name, "iterate", loop=loop, state=_schema(state)))

    def window(self, name: str, window: Tumbling | Sliding, time: str, delay_ms: int = 0,
               allowed_lateness_ms: int = 0, **aggregates: Aggregate) -> Stream:
        """Event-time windows per key. The watermark is the largest event time seen (column ``time``,
        epoch ms) minus ``delay_ms``, advanced once per epoch; a window's result is emitted once,
        in the first epoch whose watermark passes its end plus ``allowed_lateness_ms``. A record
        whose every window was emitted already is a dead letter, with its reason. Emits
        (key..., window_start, window_end, aggregates...)."""
        if not aggregates:
            raise ValueError(f"operator {name!r}: name at least one aggregate, e.g. views=abs.count()")
        return self._keyed(Node(name, "window", aggregates=dict(aggregates), window=window, time=time,
                                delay_ms=delay_ms, lateness_ms=allowed_lateness_ms))

    def join(self, name: str, other: KeyedStream) -> Stream:
        """Each record of this stream joined with ``other``'s latest record of the same key (other's
        columns added, a name both have gets the suffix ``_right``). A record whose key ``other`` has
        not sent yet waits in the join's state; ``other``'s records wait as the latest per key. Both
        sides' state is snapshotted with the operator's: barriers are aligned across its inputs."""
        if [t for _, t in other._key] != [t for _, t in self._key]:
            raise ValueError(f"join {name!r}: the two sides' keys differ in type: {self._key} and {other._key}")
        return self._keyed(Node(name, "join", inputs=(other._node,), other_key=other._key))


@dataclass
class Job:
    name: str
    description: str = ""
    parallelism: int = 2
    barrier_interval_minutes: int = 5
    policy: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    id_store: IdStorePolicy = field(default_factory=IdStorePolicy)
    #: "exactly_once" (aligned ABS, the default) or "weak": each stateful operator snapshots and
    #: restores on its own and sources never rewind, so a failure loses records (seed 003's weak
    #: consistency; ``coordinator.checkpoints.weak``). Opt-in, and labelled wherever the job shows.
    consistency: str = "exactly_once"
    #: the largest share of an inject's new records that may be dead letters (0 to 1; None: no limit):
    #: above it the inject fails (exit 1, the barrier still registered), so a batch of refused records
    #: is not a quiet success
    max_dead_letter_share: float | None = None
    nodes: list[Node] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_name(self.name, "job")  # at declaration: the name becomes paths and catalog keys
        check_dead_letter_share(self.name, self.max_dead_letter_share)  # at declaration, not at first inject

    def source(self, name: str, format: RecordFormat | None = None) -> Stream:
        """A source: segment files injected into ``$ABS_DATA_DIR/<job>/input/<partition>/`` (with
        several sources: ``input/<source>/<partition>/``), one record a line (``format`` says which
        lines are records; the others become dead letters at inject, with their reason)."""
        self._add(Node(name, "source", format=format or TextLines()))
        return Stream(self, name)

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def definition(self, origin: str = "") -> JobDefinition:
        """What the checkpoint lifecycle knows of this job (``coordinator.dataflow.jobs``); ValueError naming
        what is wrong when the declaration is incomplete or inconsistent."""
        return build_definition(self, origin)

    def _add(self, node: Node) -> None:
        for name, what in _declared_names(node):
            check_name(name, f"job {self.name!r}: {what}")
        if any(n.name == node.name for n in self.nodes):
            raise ValueError(f"job {self.name!r}: two operators are named {node.name!r}")
        self.nodes.append(node)
