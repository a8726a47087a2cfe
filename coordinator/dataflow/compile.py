"""A declared job (``coordinator.dataflow.declaration``) as the checkpoint lifecycle's ``JobDefinition``: its graph,
the keyed state of every stateful operator, its sinks and sources. Checks the declaration on the way:
a ValueError names the operator and what is wrong with it."""

from __future__ import annotations

import dataclasses
from typing import Any

from coordinator.dataflow.declaration import JobDeclaration, Node, Session, late_sink_name
from coordinator.dataflow.code_digest import code_digest
from coordinator.dataflow.ttl import check_consistency, event_columns
from coordinator.dataflow.graph import KEYED_KINDS, STATELESS_KINDS, Edge, JobGraph, Operator, OperatorKind, Partitioning
from coordinator.dataflow.iterate import LoopStep, check_loop, iterate
from coordinator.dataflow.jobs import JobDefinition, SinkSpec, StateSpec
from coordinator.sinks.dead_letters import DeadLetters
from coordinator.sinks.declarations import SqlTable
from coordinator.sinks.deletes import DELETE
from coordinator.types import Schema, sql_type

#: keyed operators with a late-record sink of their own (their dead letters)
WITH_LATE = ("window", "interval_join")
#: keyed operators whose output is their changed state rows (an upsert stream)
UPSERTS = ("aggregate", "process", "iterate")
WINDOW_BOUNDS: Schema = (("window_start", "long"), ("window_end", "long"))
#: a session window's state column, not emitted: true for a session emitted already, kept until no record
#: can reach it (``spark_jobs.operators.session_windows``)
SESSION_EMITTED = "session__emitted"
#: a re-firing window's state column, not emitted: the checkpoint that last emitted the window (null: not
#: yet), the stamp its sink row carries (``spark_jobs.operators.refire``)
WINDOW_EMITTED = "window__emitted"


def hidden(name: str, part: str) -> str:
    """A state column the operator keeps but does not emit (a mean's sum and count)."""
    return f"{name}__{part}"


def emitted(columns: list[str] | tuple[str, ...]) -> list[str]:
    """The columns an operator emits of its state: all but hidden ones, ``updated`` and the tombstone marker."""
    return [c for c in columns if "__" not in c and c not in ("updated", DELETE)]


def deletes_keys(node: Node) -> bool:
    """Whether the operator's state can lose keys, as tombstones (``coordinator.sinks.deletes``): a process
    function (its rows with ``_delete`` true), an operator with a state TTL (``coordinator.dataflow.ttl``)."""
    return node.kind is OperatorKind.PROCESS or node.ttl_epochs is not None or node.ttl_ms is not None


def aggregate_columns(node: Node) -> Schema:
    columns: list[tuple[str, str]] = []
    for name, agg in node.aggregates.items():
        if agg.kind == "mean":
            columns += [(hidden(name, "sum"), "double"), (hidden(name, "count"), "long")]
        columns.append((name, agg.type))
    return tuple(columns)


def state_spec(node: Node) -> StateSpec:
    key = node.key_names
    if node.kind is OperatorKind.WINDOW:
        emitted_flag = ((SESSION_EMITTED, "boolean"),) if isinstance(node.window, Session) else \
            ((WINDOW_EMITTED, "long"),) if node.refire else ()
        columns = (*node.key, *WINDOW_BOUNDS, *aggregate_columns(node), *emitted_flag, ("updated", "long"))
        return StateSpec(node.name, OperatorKind.WINDOW, columns, (*key, "window_start"), key)
    if node.kind is OperatorKind.JOIN:
        return StateSpec(node.name, OperatorKind.JOIN, None, (*key, "_side", "_partition", "_seq", "_n"), key)
    if node.kind is OperatorKind.INTERVAL_JOIN:  # buffered rows by their source position (``operators.interval_join``)
        return StateSpec(node.name, OperatorKind.INTERVAL_JOIN, None, (*key, "_side", "_partition", "_seq", "_n"), key)
    values = (*(aggregate_columns(node) if node.kind is OperatorKind.AGGREGATE else node.state), *event_columns(node))
    marker = ((DELETE, "boolean"),) if deletes_keys(node) else ()
    return StateSpec(node.name, node.kind, (*node.key, *values, *marker, ("updated", "long")), key, key)


def output_schema(node: Node) -> Schema | None:
    """The columns a keyed operator emits (None: a stream of records whose columns Spark knows)."""
    if node.kind in (OperatorKind.AGGREGATE, OperatorKind.PROCESS, OperatorKind.ITERATE):
        columns = state_spec(node).columns
    elif node.kind is OperatorKind.WINDOW:
        columns = (*node.key, *WINDOW_BOUNDS, *aggregate_columns(node))
    else:
        return None
    kept = emitted([c for c, _ in columns])
    return tuple((c, t) for c, t in columns if c in kept)


def _sink(job: JobDeclaration, node: Node) -> SinkSpec:
    src = job.node(node.inputs[0])
    known = dict(output_schema(src) or ())
    wanted = node.columns
    if wanted is None:
        if not known:
            raise ValueError(f"job {job.name!r}, sink {node.name!r}: the stream of {src.name!r} has no declared "
                             f"columns: name them with their types, e.g. columns={{'page': str, 'n': int}}")
        wanted = tuple(known.items())
    wanted = tuple((c, t or known.get(c, "")) for c, t in wanted)
    missing = [c for c, t in wanted if not t]
    if missing:
        raise ValueError(f"job {job.name!r}, sink {node.name!r}: columns {missing} are not among "
                         f"{', '.join(known) or 'the declared ones'}")
    upsert = src.kind in UPSERTS
    key = src.key_names if upsert else refire_key(src)
    if src.kind is OperatorKind.JOIN and src.reemit:
        if not node.upsert_key:
            raise ValueError(f"job {job.name!r}, sink {node.name!r}: the re-emitting join {src.name!r} emits a "
                             f"record again when its row changes: name the columns that identify a record, "
                             f"e.g. key=('id',)")
        key = node.upsert_key
    elif node.upsert_key:
        raise ValueError(f"job {job.name!r}, sink {node.name!r}: key= is for the sinks of a re-emitting join "
                         f"(join(..., reemit=True)); {src.name!r}'s stream "
                         + ("upserts by its own key" if key else "is appended"))
    if key is not None and tuple(c for c, _ in wanted[:len(key)]) != key:
        raise ValueError(f"job {job.name!r}, sink {node.name!r}: columns must start with the key "
                         f"{', '.join(map(repr, key))}")
    if isinstance(node.target, SqlTable):  # here, not at the first finalize, once the epochs have run
        for c, t in wanted:
            sql_type(t, f"job {job.name!r}, sink {node.name!r}, column {c!r}")
    return SinkSpec(node.name, node.target, wanted, key, src.name, from_state=upsert)


def refire_key(node: Node) -> tuple[str, ...] | None:
    """A re-firing window's sinks upsert by key and window start (a window's row is replaced when it
    fires again); None for every other stream (appended)."""
    return (*node.key_names, "window_start") if node.kind is OperatorKind.WINDOW and node.refire else None


def late_sink(node: Node) -> SinkSpec:
    columns = (("partition", "string"), ("offset", "long"), ("reason", "string"), ("payload", "string"))
    return SinkSpec(late_sink_name(node.name), DeadLetters(node.name), columns, None, node.name, from_state=False)


def operator_params(node: Node) -> dict[str, Any]:
    """What shapes ``node``'s output besides its state's columns, as plain data (its part of the job's
    version): its function's code digest, its aggregates, window, times, TTL, join bounds, loop."""
    params: dict[str, Any] = {}
    if node.fn is not None:
        params["code"] = code_digest(node.fn)
    if node.aggregates:
        params["aggregates"] = {name: [a.kind, a.type, a.column]
                                + ([code_digest(a.value), code_digest(a.merge)] if a.kind == "combine" else [])
                                for name, a in node.aggregates.items()}
    for part in ("window", "interval"):
        value = getattr(node, part)
        if value is not None:
            params[part] = {"kind": type(value).__name__, **dataclasses.asdict(value)}
    if node.loop is not None:
        params["loop"] = {"head": code_digest(node.loop.head), "body": code_digest(node.loop.body),
                          "rounds": node.loop.rounds, "back_edge_key": node.loop.back_edge_key}
    for what in ("time", "delay_ms", "lateness_ms", "refire", "reemit", "ttl_epochs", "ttl_ms"):
        value = getattr(node, what)
        if value:
            params[what] = value
    return params


def build_definition(job: JobDeclaration, origin: str = "") -> JobDefinition:
    p = job.parallelism
    sources = [n for n in job.nodes if n.kind is OperatorKind.SOURCE]
    if not sources:
        raise ValueError(f"job {job.name!r} declares no source: job.source(name, abs.TextLines())")
    keyed = [n for n in job.nodes if n.kind in (*KEYED_KINDS, OperatorKind.ITERATE)]
    if not keyed:
        raise ValueError(f"job {job.name!r} declares no keyed operator: .key_by(key, type).aggregate(...)")
    sinks = [n for n in job.nodes if n.kind is OperatorKind.SINK]
    if not sinks:
        raise ValueError(f"job {job.name!r} declares no sink: .sink(name, abs.SqlTable(table))")
    loops = [n for n in keyed if n.kind is OperatorKind.ITERATE]
    check_consistency(job.name, [n.name for n in keyed if n.ttl_epochs or n.ttl_ms], job.consistency)
    if loops and len(keyed) > 1:
        raise ValueError(f"job {job.name!r}: a job with an iterate loop has no other keyed operator (yet)")
    operators: list[Operator] = []
    edges: list[Edge] = []
    loop = None
    for node in job.nodes:
        if node.kind is OperatorKind.SOURCE:
            operators.append(Operator(node.name, OperatorKind.SOURCE, p))
        elif node.kind in STATELESS_KINDS:
            operators.append(Operator(node.name, node.kind, p))
        elif node.kind is OperatorKind.SINK:
            operators.append(Operator(node.name, OperatorKind.SINK, p))
        elif node.kind is OperatorKind.ITERATE:
            loop = iterate(
                head=Operator(node.name, OperatorKind.ITERATE_HEAD, p),
                body=[LoopStep(Operator(node.loop.body_name, OperatorKind.FLAT_MAP, p), Partitioning.FORWARD)],
                tail=LoopStep(Operator(node.loop.tail_name, OperatorKind.ITERATE_TAIL, p), Partitioning.HASH),
                feedback=Partitioning.FORWARD,
            )
            operators += loop.operators
            edges += [Edge(up, node.name, Partitioning.HASH) for up in node.inputs] + list(loop.edges)
            continue
        else:
            operators.append(Operator(node.name, node.kind, p))
            if node.kind in WITH_LATE:  # its late records go to the dead letters, two-phase like any sink
                operators.append(Operator(late_sink_name(node.name), OperatorKind.SINK, p))
                edges.append(Edge(node.name, late_sink_name(node.name), Partitioning.FORWARD))
        hashed = node.kind in (*KEYED_KINDS, OperatorKind.ITERATE)
        for upstream in node.inputs:
            edges.append(Edge(upstream, node.name, Partitioning.HASH if hashed else Partitioning.FORWARD))
    for node in job.nodes:
        for up in (job.node(i) for i in node.inputs):
            if up.kind is OperatorKind.JOIN and up.reemit and node.kind is not OperatorKind.SINK:
                raise ValueError(f"job {job.name!r}: {node.name!r} reads the re-emitting join {up.name!r}, whose "
                                 f"records come again when their row changes: only sinks may read it")
    graph = JobGraph(operators=tuple(operators), edges=tuple(edges))
    if loop is not None:
        check_loop(graph, loop)
    return JobDefinition(
        name=job.name, description=job.description, graph=graph,
        states=tuple(state_spec(n) for n in keyed),
        sinks=(*(_sink(job, n) for n in sinks), *(late_sink(n) for n in keyed if n.kind in WITH_LATE)),
        sources=tuple((n.name, n.format) for n in sources), policy=job.policy,
        barrier_interval_minutes=job.barrier_interval_minutes, id_store=job.id_store,
        loop_rounds=loops[0].loop.rounds if loops else 4, consistency=job.consistency,
        max_dead_letter_share=job.max_dead_letter_share, spec=job, origin=origin,
        params={n.name: operator_params(n) for n in job.nodes
                if n.kind not in (OperatorKind.SOURCE, OperatorKind.SINK)},
    )
