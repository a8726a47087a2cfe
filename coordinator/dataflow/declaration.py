"""What a job file declares, as data: the job's settings and its graph of nodes (operators with their
aggregates, loops and windows). ``absreplay.api`` builds it; ``coordinator.dataflow.compile`` reads it into
the checkpoint lifecycle's ``JobDefinition``; ``spark_jobs.operators.dataflow`` runs it. No Spark here.

Names are checked as they are declared: they become paths and catalog keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.dataflow.demo_data import DemoData
from coordinator.dataflow.graph import OperatorKind
from coordinator.checkpoints.policy import CheckpointPolicy, IdStorePolicy
from coordinator.dataflow.jobs import check_dead_letter_share, check_name
from coordinator.keywords import checked_keywords
from coordinator.sinks.declarations import SinkDeclaration
from coordinator.sources.record_formats import RecordFormat
from coordinator.types import Schema, ddl

Transform = Callable[[Any], Any]  # DataFrame -> DataFrame
Types = dict[str, "type | str"]


def schema(fields: Types) -> Schema:
    """Declared columns and their types (Python types or Spark DDL names) as (column, DDL) pairs."""
    return tuple((c, ddl(t)) for c, t in fields.items())


# -- the parts of a node ----------------------------------------------------------------------------
@checked_keywords()
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


@checked_keywords()
@dataclass(frozen=True)
class Loop:
    """An iterate loop (docs/jobs.md, "Cyclic dataflows") whose head keeps keyed state.

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


@checked_keywords()
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


@checked_keywords()
@dataclass(frozen=True)
class Sliding:
    """Event-time windows of ``size_ms`` starting every ``slide_ms`` (a record is in several)."""

    size_ms: int
    slide_ms: int


@checked_keywords()
@dataclass(frozen=True)
class Session:
    """Event-time sessions per key (``spark_jobs.operators.session_windows``): a record at event time t
    spans [t, t + ``gap_ms``); records whose spans overlap are one session, so a session is
    [its first event time, its last + gap) and a record that bridges two sessions merges them."""

    gap_ms: int

    def __post_init__(self) -> None:
        if isinstance(self.gap_ms, bool) or not isinstance(self.gap_ms, int) or self.gap_ms <= 0:
            raise ValueError(f"abs.Session(gap_ms={self.gap_ms!r}): the gap is a positive number of milliseconds")


@dataclass(frozen=True)
class IntervalJoin:
    """An interval join's bounds and kind (``spark_jobs.operators.interval_join``): a left row at event time
    ta and a right row of the same key at tb match when tb - ``lower_ms`` <= ta <= tb + ``upper_ms``;
    ``right_time``: the right input's event-time column; ``how``: "inner", or "left" (a left row that
    matched nothing is emitted once with nulls on the right)."""

    right_time: str
    lower_ms: int
    upper_ms: int
    how: str = "inner"

    def __post_init__(self) -> None:
        for what, ms in (("lower_ms", self.lower_ms), ("upper_ms", self.upper_ms)):
            if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
                raise ValueError(f"interval join: {what}={ms!r} must be a number of milliseconds, 0 or more")
        if self.how not in ("inner", "left"):
            raise ValueError(f"interval join: how={self.how!r} must be 'inner' or 'left'")


# -- the graph --------------------------------------------------------------------------------------
@dataclass
class Node:
    """One operator of the declared graph."""

    name: str
    kind: OperatorKind
    inputs: tuple[str, ...] = ()
    fn: Transform | None = None
    key: Schema = ()
    aggregates: dict[str, Aggregate] = field(default_factory=dict)
    state: Schema = ()
    loop: Loop | None = None
    format: RecordFormat | None = None
    window: Tumbling | Sliding | Session | None = None
    time: str = ""
    delay_ms: int = 0
    lateness_ms: int = 0
    #: a tumbling or sliding window: emitted when the watermark passes its end, emitted again (replacing
    #: its row in the sinks) when records within the allowed lateness change it (``spark_jobs.operators.refire``)
    refire: bool = False
    #: a lookup join: every record stays in its state and is emitted again when its key's row changes
    reemit: bool = False
    #: a sink of a re-emitting join: the columns that identify a record, its rows upserted by them
    upsert_key: tuple[str, ...] = ()
    target: SinkDeclaration | None = None
    columns: Schema | None = None
    #: a join: the other input's key columns, in the order of this one's
    other_key: Schema = ()
    #: an interval join's bounds (``kind`` "interval_join"; ``time`` is the left input's event time)
    interval: IntervalJoin | None = None
    #: an aggregate's or process function's state TTL: a key no epoch writes for this many epochs is
    #: dropped (``coordinator.dataflow.ttl``); None: kept for ever
    ttl_epochs: int | None = None
    #: or in event time: a key whose newest event time (column ``time``) is this far behind the watermark
    ttl_ms: int | None = None

    def __post_init__(self) -> None:
        self.kind = OperatorKind(self.kind)  # the job API names kinds by their values

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.key)


def late_sink_name(window: str) -> str:
    """The sink of a window's late records (the dead letters, two-phase like any sink)."""
    return f"{window}_late"


def declared_names(node: Node) -> list[tuple[str, str]]:
    """Each name the node brings into the graph, with what it is declared as: a window's late-record
    sink and a loop's body and tail are operators of their own, kept in the catalog like any."""
    names = [(node.name, node.kind if node.kind in (OperatorKind.SOURCE, OperatorKind.SINK) else "operator")]
    if node.kind in (OperatorKind.WINDOW, OperatorKind.INTERVAL_JOIN):
        names.append((late_sink_name(node.name), f"{node.kind.replace('_', ' ')} {node.name!r}: late-record sink"))
    if node.loop is not None:
        names += [(node.loop.body_name, "loop body"), (node.loop.tail_name, "loop tail")]
    return names


def _job_named(_: str, arguments: dict[str, Any]) -> str:
    """Where a job's keyword was given: the job, by the name it is declared with."""
    return f"job {arguments['name']}" if "name" in arguments else "Job"


@checked_keywords(_job_named)
@dataclass
class JobDeclaration:
    """A job's settings and its nodes in declared order (``absreplay.api.Job`` adds the builder)."""

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
    #: sample input and an independent reference of the sink, for ``absreplay demo`` (``coordinator.dataflow.demo_data``)
    demo: DemoData | None = None
    nodes: list[Node] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_name(self.name, "job")  # at declaration: the name becomes paths and catalog keys
        check_dead_letter_share(self.name, self.max_dead_letter_share)  # at declaration, not at first inject

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def add_node(self, node: Node) -> None:
        """Append ``node``; ValueError when one of its names breaks the rule or is taken."""
        for name, what in declared_names(node):
            check_name(name, f"job {self.name!r}: {what}")
        if any(n.name == node.name for n in self.nodes):
            raise ValueError(f"job {self.name!r}: two operators are named {node.name!r}")
        self.nodes.append(node)
