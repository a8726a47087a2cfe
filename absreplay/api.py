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
and the DAGs without a JVM; ``spark_jobs.operators.dataflow`` runs it.

Streams are appends (records) or upserts (a keyed operator's changed rows, one
per key). Every keyed operator keeps its own state, snapshotted and restored on
its own; a sink takes one stream, two-phase, exactly once.

Types are Python types (``str``, ``int`` (64-bit), ``float``, ``bool``,
``datetime.datetime`` (a timestamp), ``list[int]``) or Spark DDL names (``"string"``,
``"timestamp"``, ``"array<long>"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator.dataflow.declaration import (
    Aggregate,
    IntervalJoin,
    JobDeclaration,
    Loop,
    Node,
    Session,
    Sliding,
    Transform,
    Tumbling,
    Types,
    schema,
)
from coordinator.dataflow.demo_data import DemoData
from coordinator.dataflow.compile import build_definition
from coordinator.checkpoints.policy import CheckpointPolicy, IdStorePolicy
from coordinator.dataflow.ttl import check_ttl_epochs, check_ttl_ms
from coordinator.dataflow.jobs import JobDefinition
from coordinator.keywords import checked_keywords
from coordinator.sinks.declarations import DeltaTable, KafkaTopic, ParquetDirectory, SinkDeclaration, SqlTable
from coordinator.sources.delta_source import DeltaSource
from coordinator.sources.kafka_source import KafkaSource
from coordinator.sources.record_formats import Csv, JsonLines, LineCheck, ParquetFiles, RecordFormat, TextLines
from coordinator.types import Schema, ddl

__all__ = [
    "Aggregate", "CheckpointPolicy", "Csv", "DeltaSource", "DeltaTable", "DemoData", "IdStorePolicy", "Job",
    "KafkaSource", "KafkaTopic",
    "JsonLines", "KeyedStream", "LineCheck", "Loop", "ParquetDirectory", "Session", "Sliding", "SqlTable", "Stream",
    "TextLines", "Tumbling",
    "combine", "count", "delta_source", "json_lines", "kafka", "csv", "max", "mean", "min", "parquet", "sum",
]


@checked_keywords()
def json_lines(fields: Types, time: str | None = None, id: str | None = None) -> JsonLines:  # noqa: A002
    """JSON objects, one a line, with these fields; ``time``: the event-time field, declared ``int`` (epoch ms)
    or ``datetime`` / ``"timestamp"`` (ISO-8601 strings, read as Spark reads them, UTC without an offset:
    ``coordinator.sources.event_time``); ``id``: the records' id field: a record whose id was seen already
    is a dead letter (exactly once for sources that resend)."""
    return JsonLines(schema(fields), time, id)


@checked_keywords()
def csv(fields: Types, time: str | None = None, delimiter: str = ",") -> Csv:
    """Comma-separated values, the declared fields in order; ``time`` as for ``json_lines``."""
    return Csv(schema(fields), time, delimiter)


@checked_keywords()
def parquet(fields: Types, time: str | None = None) -> ParquetFiles:
    """Parquet segment files, one record a row, with these columns (others are not read); ``time``: an
    ``int`` column (epoch ms) or a ``datetime`` one (Parquet timestamps in ms or us, UTC without a zone)."""
    return ParquetFiles(schema(fields), time)


@checked_keywords()
def delta_source(uri: str, fields: Types, time: str | None = None,
                 storage_options: dict[str, str] | None = None, from_version: int = 0) -> DeltaSource:
    """The rows appended to the Delta table at ``uri`` (a path, ``file://``, ``s3://``...; it may name
    ``${VAR}``, read at each inject and run as a sink's location is), with these
    columns (others are not read): each new table version is a segment, a barrier's cut the version it
    reached; a version that deletes, updates, merges or overwrites is refused at inject
    (``coordinator.sources.delta_source``). ``storage_options``: delta-rs' options for the table's
    storage; ``from_version``: the first version read (earlier versions' rows are not records of the job)."""
    return DeltaSource(schema(fields), time, uri=uri, storage_options=tuple(sorted((storage_options or {}).items())),
                       from_version=from_version)


@checked_keywords()
def kafka(topics: str | list[str] | None = None, *, bootstrap_servers: str,
          records: TextLines | JsonLines | Csv | None = None, pattern: str | None = None,
          options: dict[str, str] | None = None, group_id: str | None = None) -> KafkaSource:
    """The records of Kafka topics (``topics``: a name or names; or ``pattern``: a regular expression the
    topics' names match whole), each record's value one of ``records`` (default: a text line;
    ``abs.json_lines(...)`` or ``abs.csv(...)`` with their fields, ``time=`` and ``id=``). A barrier's cut is
    every partition's last stable offset, an epoch the offsets between two cuts, read ``read_committed``;
    a record's sequence number is its offset (``coordinator.sources.kafka_source``). ``bootstrap_servers``
    and ``options`` (client settings such as ``security.protocol``, ``sasl.*``, ``ssl.*``) may name
    ``${VAR}``, read when the brokers are reached, never stored; ``group_id``: the consumer group whose
    offsets follow the committed checkpoints (default ``absreplay-<job>``)."""
    named = (topics,) if isinstance(topics, str) else tuple(topics or ())
    return KafkaSource(records if records is not None else TextLines(), topics=named, pattern=pattern,
                       bootstrap_servers=bootstrap_servers, options=tuple(sorted((options or {}).items())),
                       group_id=group_id)


# -- keyed aggregates -------------------------------------------------------------------------------
@checked_keywords()
def count() -> Aggregate:
    return Aggregate("count", "long")


@checked_keywords()
def sum(column: str, type: type | str = int) -> Aggregate:  # noqa: A001 - the aggregate's name
    return Aggregate("sum", ddl(type), column)


@checked_keywords()
def min(column: str, type: type | str = int) -> Aggregate:  # noqa: A001
    return Aggregate("min", ddl(type), column)


@checked_keywords()
def max(column: str, type: type | str = int) -> Aggregate:  # noqa: A001
    return Aggregate("max", ddl(type), column)


@checked_keywords()
def mean(column: str) -> Aggregate:
    """Kept as sum and count (two hidden state columns); the output is the mean, a double."""
    return Aggregate("mean", "double", column)


@checked_keywords()
def combine(value: Callable[[], Any], merge: Callable[[Any], Any], type: type | str) -> Aggregate:
    """A user-defined combiner: ``value()`` returns a Column over a record, ``merge`` an aggregate
    function of a Column (e.g. ``lambda c: F.bit_or(c)``)."""
    return Aggregate("combine", ddl(type), None, value, merge)


def ttl_options(operator: str, ttl_epochs: object, ttl_ms: object, time: object) -> dict[str, Any]:
    """A keyed operator's state TTL as ``Node`` fields, checked (ValueError at declaration)."""
    ms = check_ttl_ms(operator, ttl_ms, time, ttl_epochs)
    return {"ttl_epochs": check_ttl_epochs(operator, ttl_epochs), "ttl_ms": ms, "time": time if ms else ""}


# -- the builder ----------------------------------------------------------------------------------
#: what an aggregating operator's other keywords are: its output columns, each with its aggregate
AGGREGATES = (Aggregate, "keyword names an aggregate, e.g. n=abs.count()")


def _operator(call: str, arguments: dict[str, Any]) -> str:
    """Where an operator's keyword was given: the job, the method and the operator's name."""
    declaring = arguments["self"]
    job = declaring if isinstance(declaring, Job) else declaring._job
    return f"job {job.name}: {call}" + (f" {arguments['name']!r}" if "name" in arguments else "")


class Stream:
    """The records an operator emits each epoch (one DataFrame per epoch)."""

    def __init__(self, job: Job, node: str) -> None:
        self._job, self._node = job, node

    def _then(self, node: Node) -> Stream:
        self._job.add_node(node)
        return Stream(self._job, node.name)

    @checked_keywords(_operator)
    def map(self, name: str, fn: Transform) -> Stream:
        return self._then(Node(name, "map", (self._node,), fn))

    @checked_keywords(_operator)
    def filter(self, name: str, fn: Transform) -> Stream:
        """``fn(df)`` returns the records to keep (e.g. ``lambda df: df.where(...)``)."""
        return self._then(Node(name, "filter", (self._node,), fn))

    @checked_keywords(_operator)
    def flat_map(self, name: str, fn: Transform) -> Stream:
        return self._then(Node(name, "flat_map", (self._node,), fn))

    @checked_keywords(_operator)
    def key_by(self, key: str | dict[str, type | str], type: type | str | None = None) -> KeyedStream:
        """Partition by ``key`` (a column and its type, or several: ``{"country": str, "page": str}``)."""
        fields = {key: type} if isinstance(key, str) else dict(key)
        if any(t is None for t in fields.values()):
            raise ValueError(f"key_by({key!r}): give the key's type, e.g. key_by('word', str)")
        return KeyedStream(self._job, self._node, schema(fields))

    @checked_keywords(_operator)
    def sink(self, name: str, target: SinkDeclaration, columns: tuple[str, ...] | Types | None = None,
             key: tuple[str, ...] | str | None = None) -> Stream:
        """Send the stream to ``target``, two-phase: each checkpoint's records are committed when the
        checkpoint is. A keyed operator's output upserts by its key; other streams append.
        ``columns``: which columns (default: all of a keyed operator's output; a stream of records
        must name its columns with their types). ``key``: for a re-emitting join's stream (and only
        there), the columns that identify a record, first among ``columns``: its rows upsert by them."""
        if isinstance(columns, dict):
            columns = schema(columns)
        elif columns is not None:
            columns = tuple((c, "") for c in columns)
        upsert_key = (key,) if isinstance(key, str) else tuple(key or ())
        self._job.add_node(Node(name, "sink", (self._node,), target=target, columns=columns, upsert_key=upsert_key))
        return self


class KeyedStream:
    def __init__(self, job: Job, node: str, key: Schema) -> None:
        self._job, self._node, self._key = job, node, key

    def _keyed(self, node: Node) -> Stream:
        node.inputs, node.key = (self._node, *node.inputs), self._key
        self._job.add_node(node)
        return Stream(self._job, node.name)

    @checked_keywords(_operator, AGGREGATES)
    def aggregate(self, name: str, ttl_epochs: int | None = None, ttl_ms: int | None = None,
                  time: str | None = None, **aggregates: Aggregate) -> Stream:
        """Per key, the named aggregates over every record so far; emits the changed keys' rows.
        ``ttl_epochs=N``: a key that takes no record for N epochs is dropped (a delete in its sinks); a
        later record starts it again from nothing. ``ttl_ms=T, time="ts"``: in event time, a key whose
        newest record is T ms or more behind the operator's watermark is dropped
        (``coordinator.dataflow.ttl``)."""
        if not aggregates:
            raise ValueError(f"operator {name!r}: name at least one aggregate, e.g. count=abs.count()")
        return self._keyed(Node(name, "aggregate", aggregates=dict(aggregates), **ttl_options(
            name, ttl_epochs, ttl_ms, time)))

    @checked_keywords(_operator)
    def process(self, name: str, fn: Callable[..., Any], state: Types, ttl_epochs: int | None = None,
                ttl_ms: int | None = None, time: str | None = None) -> Stream:
        """Keyed process function, epoch-batched: ``fn(state, records)`` gets the state rows of the
        keys the epoch's records touch and those records, both Spark DataFrames (the records with their
        ``_partition`` and ``_seq`` where the source gives them: docs/jobs.md), and returns the new state
        rows (key and ``state`` columns) of the keys whose state changed; other keys keep theirs. Emits them.

        Deletes: a returned row with a boolean column ``_delete`` true deletes its key: it leaves the
        state, and each upsert sink of this operator deletes the key's row in that checkpoint's commit
        (the emitted row carries ``_delete`` true). ``_delete`` false or null, or no such column: the
        row is the key's new state.

        ``ttl_epochs=N``: a key for which ``fn`` returns no row for N epochs is dropped, as if deleted;
        ``ttl_ms=T, time="ts"``: in event time (``coordinator.dataflow.ttl``)."""
        return self._keyed(Node(name, "process", fn=fn, state=schema(state), **ttl_options(
            name, ttl_epochs, ttl_ms, time)))

    @checked_keywords(_operator)
    def iterate(self, name: str, loop: Loop, state: Types) -> Stream:
        return self._keyed(Node(name, "iterate", loop=loop, state=schema(state)))

    @checked_keywords(_operator, AGGREGATES)
    def window(self, name: str, window: Tumbling | Sliding | Session, time: str, delay_ms: int = 0,
               allowed_lateness_ms: int = 0, refire: bool = False, **aggregates: Aggregate) -> Stream:
        """Event-time windows per key. The watermark is the largest event time seen (column ``time``,
        epoch ms, or a timestamp as its epoch ms) minus ``delay_ms``, advanced once per epoch; a window's result is emitted once,
        in the first epoch whose watermark passes its end plus ``allowed_lateness_ms``. A record
        whose every window was emitted already is a dead letter, with its reason. Emits
        (key..., window_start, window_end, aggregates...).

        ``abs.Session(gap_ms=...)``: per key, a session is [first event time, last event time + gap);
        a record bridging two sessions merges them. It is emitted once, in the first epoch whose
        watermark is at or past its end plus ``allowed_lateness_ms``; a record for a session emitted
        already is a dead letter (``spark_jobs.operators.session_windows``).

        ``refire=True`` (tumbling and sliding windows): a window is emitted as soon as the watermark passes
        its end, then emitted again, replacing its row, in each later epoch whose records within the
        allowed lateness change it; it leaves the state when the watermark passes its end plus
        ``allowed_lateness_ms``. Its sinks upsert by (key..., window_start); a rewind puts back each
        window's row as of the checkpoint (``spark_jobs.operators.refire``)."""
        if not aggregates:
            raise ValueError(f"operator {name!r}: name at least one aggregate, e.g. views=abs.count()")
        if not isinstance(refire, bool):
            raise ValueError(f"window {name!r}: refire={refire!r} must be True or False")
        if refire and isinstance(window, Session):
            raise ValueError(f"window {name!r}: refire is for Tumbling and Sliding windows; a session is emitted "
                             f"once, when the watermark passes its end plus allowed_lateness_ms")
        return self._keyed(Node(name, "window", aggregates=dict(aggregates), window=window, time=time,
                                delay_ms=delay_ms, lateness_ms=allowed_lateness_ms, refire=refire))

    @checked_keywords(_operator)
    def join(self, name: str, other: KeyedStream, reemit: bool = False) -> Stream:
        """Each record of this stream joined with ``other``'s latest record of the same key (other's
        columns added, a name both have gets the suffix ``_right``). A record whose key ``other`` has
        not sent yet waits in the join's state; ``other``'s records wait as the latest per key. Both
        sides' state is snapshotted with the operator's: barriers are aligned across its inputs.

        ``reemit=True``: every record stays in the state, and when ``other`` sends a new row for a key,
        the key's records are emitted again with it. The stream then goes to sinks that upsert by the
        columns identifying a record (``.sink(..., key=("id",))``), straight from the join; no keyed
        operator may read it (it would count a record twice). A rewind puts each sink row back as of
        its checkpoint. The state grows with this stream: every record is kept."""
        if [t for _, t in other._key] != [t for _, t in self._key]:
            raise ValueError(f"join {name!r}: the two sides' keys differ in type: {self._key} and {other._key}")
        if not isinstance(reemit, bool):
            raise ValueError(f"join {name!r}: reemit={reemit!r} must be True or False")
        return self._keyed(Node(name, "join", inputs=(other._node,), other_key=other._key, reemit=reemit))

    @checked_keywords(_operator)
    def interval_join(self, name: str, other: KeyedStream, time: str | tuple[str, str], lower_ms: int,
                      upper_ms: int, how: str = "inner", delay_ms: int = 0) -> Stream:
        """A stream-stream join on key and event time (``spark_jobs.operators.interval_join``): a row of
        this stream at ta and one of ``other``'s at tb, of the same key, match when
        tb - ``lower_ms`` <= ta <= tb + ``upper_ms``; each matching pair is emitted once, in the epoch
        where the later of the two arrives (other's columns added, a name both have gets the suffix
        ``_right``). ``time``: the event-time column of both, or (this one's, other's).

        The watermark is the smaller of the two inputs' newest event times minus ``delay_ms``, advanced
        once per epoch (none until both inputs sent a record). A row of either side whose event time is
        below the watermark before its epoch is a dead letter with its reason (rows it would match may
        have left the state); a left row leaves the state once the watermark passes ta + ``lower_ms``, a
        right row once it passes tb + ``upper_ms``. ``how="left"``: a left row that matched nothing is
        emitted once with nulls on the right, in the epoch its row leaves the state."""
        if [t for _, t in other._key] != [t for _, t in self._key]:
            raise ValueError(f"interval join {name!r}: the two sides' keys differ in type: {self._key} and "
                             f"{other._key}")
        left_time, right_time = (time, time) if isinstance(time, str) else time
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
            raise ValueError(f"interval join {name!r}: delay_ms={delay_ms!r} must be a number of milliseconds, "
                             f"0 or more")
        try:
            bounds = IntervalJoin(right_time, lower_ms, upper_ms, how)
        except ValueError as exc:
            raise ValueError(f"interval join {name!r}: {str(exc).removeprefix('interval join: ')}") from None
        return self._keyed(Node(name, "interval_join", inputs=(other._node,), other_key=other._key,
                                time=left_time, delay_ms=delay_ms, interval=bounds))


class Job(JobDeclaration):
    """A job: ``Job(name, parallelism=..., ...)`` (the settings of ``JobDeclaration``), then its graph,
    from ``job.source(...)`` on."""

    @checked_keywords(_operator)
    def source(self, name: str, format: RecordFormat | None = None) -> Stream:
        """A source: segment files injected into ``$ABS_DATA_DIR/<job>/input/<partition>/`` (with
        several sources: ``input/<source>/<partition>/``), one record a line (``format`` says which
        lines are records; the others become dead letters at inject, with their reason)."""
        self.add_node(Node(name, "source", format=format or TextLines()))
        return Stream(self, name)

    def definition(self, origin: str = "") -> JobDefinition:
        """What the checkpoint lifecycle knows of this job (``coordinator.dataflow.jobs``); ValueError naming
        what is wrong when the declaration is incomplete or inconsistent."""
        return build_definition(self, origin)
