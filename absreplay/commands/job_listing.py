"""What ``absreplay jobs`` shows: every job discovery found and every job file that failed to load.

For each job: where it was found (an entry point or a file of ``$ABS_JOBS_DIR``), its graph as
operator chains, its sinks with their targets, and what the catalog knows of it (none when the
catalog has no schema yet). As rich tables, or as one JSON document (``as_json``).

Nothing here connects to a sink: a target is described from its declaration (a SQL table's
database is named, not reached). User text (descriptions, errors) is never read as rich markup.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from coordinator.dataflow.discovery import Found
from coordinator.catalog.db import safe_url
from coordinator.checkpoints import weak
from coordinator.checkpoints.store import CheckpointStore
from coordinator.dataflow.graph import Edge, JobGraph, Partitioning
from coordinator.dataflow.jobs import JobDefinition, SinkSpec

CONNECTORS = {Partitioning.FORWARD: "->", Partitioning.HASH: "=>", Partitioning.BROADCAST: "=>>"}
#: the edge that returns a loop's records to its head (a back-edge: ``coordinator.dataflow.graph``)
BACK_EDGE = "~>"
LEGEND = "edges: -> forward, => hash (a shuffle), =>> broadcast, ~> the loop's back-edge"


# -- one job --------------------------------------------------------------------------------------
def chain_steps(graph: JobGraph) -> list[list[str]]:
    """The graph as chains in topological order, each a list of steps: the first operator, then
    ``connector name(kind)`` for each edge followed. A chain ends at a back-edge (``~> head``) or
    where nothing new follows; a branch off an operator already shown starts a new chain with that
    operator's name alone. Every edge is shown once."""
    execution = graph.to_execution_graph()
    kinds = {op.name: str(op.kind) for op in graph.operators}
    shown: set[str] = set()
    drawn: set[Edge] = set()
    chains: list[list[str]] = []
    for start in execution.order:
        if start in shown:
            continue
        into = next((e for e in graph.edges if e.target == start and e.source in shown and e not in drawn), None)
        steps = [into.source] if into else []
        connector = f"{CONNECTORS[into.partitioning]} " if into else ""
        drawn |= {into} if into else set()
        node: str | None = start
        while node is not None:
            shown.add(node)
            steps.append(f"{connector}{node}({kinds[node]})")
            out = [e for e in graph.edges if e.source == node and e not in drawn]
            step = next((e for e in out if e not in execution.back_edges and e.target not in shown), None)
            if step is None:
                for back in (e for e in out if e in execution.back_edges):
                    steps.append(f"{BACK_EDGE} {back.target}")
                    drawn.add(back)
                node = None
            else:
                connector = f"{CONNECTORS[step.partitioning]} "
                drawn.add(step)
                node = step.target
        chains.append(steps)
    # what no chain drew (an edge into an operator already shown, a back-edge mid-chain)
    chains += [[e.source, f"{BACK_EDGE if e in execution.back_edges else CONNECTORS[e.partitioning]} {e.target}"]
               for e in graph.edges if e not in drawn]
    return chains


def graph_chains(graph: JobGraph) -> list[str]:
    """One line per chain: ``source(source) -> tokenize(flat_map) => count(aggregate) -> sink(sink)``."""
    return [" ".join(steps) for steps in chain_steps(graph)]


def sink_target(sink: SinkSpec, catalog_url: str) -> str:
    """The target as the sink's own log lines name it, without connecting to it."""
    try:
        return sink.target(catalog_url).describe()
    except Exception as exc:  # noqa: BLE001 - a declaration its target refuses (a malformed URL) is still listed
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"{type(sink.declaration).__name__} that cannot be described ({exc.__class__.__name__}: {first})"


def catalog_facts(store: CheckpointStore | None, job: JobDefinition) -> dict[str, Any] | None:
    """What the catalog knows of the job (None: the catalog has no schema yet)."""
    if store is None:
        return None
    row = store.job(job.name)
    if row is None:
        return {"registered": False}
    latest = store.latest_completed(job.name)
    operators = json.loads(row.execution_graph)["operators"]
    return {
        "registered": True,
        "tasks": row.total_tasks,
        # the graph its last run used: a run at another parallelism re-registers it
        "parallelism": next((o["parallelism"] for o in operators if o["name"] == job.state_operator), None),
        "max_parallelism": row.max_parallelism,
        "last_checkpoint": row.last_checkpoint_id,
        "latest_completed": latest.checkpoint_id if latest else None,
    }


def job_json(job: JobDefinition, store: CheckpointStore | None, catalog_url: str) -> dict[str, Any]:
    graph = job.execution_graph.to_json()
    return {
        "name": job.name,
        "origin": job.origin,
        "description": job.description,
        "consistency": job.consistency,
        "parallelism": job.parallelism,
        "operators": graph["operators"],
        "edges": graph["edges"],
        "graph": graph_chains(job.graph),
        "states": [{"operator": st.operator, "kind": st.kind, "key": list(st.key), "incremental": st.incremental}
                   for st in job.states],
        "sinks": [
            {"name": s.name, "kind": type(s.declaration).__name__, "target": sink_target(s, catalog_url),
             "columns": [{"name": c, "type": t} for c, t in s.columns]}
            for s in job.sinks
        ],
        "catalog": catalog_facts(store, job),
    }


# -- the listing ----------------------------------------------------------------------------------
def as_json(found: Found, store: CheckpointStore | None, catalog_url: str) -> dict[str, Any]:
    return {
        "jobs": [job_json(job, store, catalog_url) for _, job in sorted(found.jobs.items())],
        "broken": [{"origin": b.origin, "error": b.error} for b in found.broken],
    }


def _catalog_cell(facts: dict[str, Any] | None) -> str:
    if facts is None:
        return "-"
    if not facts["registered"]:
        return "not registered yet"
    latest = facts["latest_completed"]
    return "\n".join([
        f"last checkpoint {facts['last_checkpoint']}",
        f"latest completed {'-' if latest is None else latest}",
        f"ran at parallelism {facts['parallelism']} ({facts['tasks']} tasks), max {facts['max_parallelism']}",
    ])


def jobs_table(found: Found, store: CheckpointStore | None, catalog_url: str) -> Table:
    """One row a job; the graph one step a line (``=> count(aggregate)``), so a cell never
    breaks inside a step. Nothing is cut short: long origins fold."""
    table = Table(title="jobs", caption=LEGEND, show_lines=True)
    for col in ("job", "found in", "parallelism", "graph", "sinks", "catalog"):
        table.add_column(col, overflow="fold", justify="right" if col == "parallelism" else "left")
    for _, job in sorted(found.jobs.items()):
        name = Text(job.name, style="bold")
        if job.description:
            name.append(f"\n{job.description}", style="dim")
        if job.consistency == "weak":
            name.append(f"\n{weak.LABEL}", style="bold red")
        graph = "\n".join("\n  ".join(steps) for steps in chain_steps(job.graph))
        sinks = "\n".join(f"{s.name}: {sink_target(s, catalog_url)}; columns {', '.join(s.column_names)}"
                          for s in job.sinks)
        table.add_row(name, Text(job.origin), str(job.parallelism), Text(graph), Text(sinks),
                      Text(_catalog_cell(catalog_facts(store, job))))
    return table


def print_listing(out: Console, found: Found, store: CheckpointStore | None, catalog_url: str) -> None:
    if found.jobs:
        out.print(jobs_table(found, store, catalog_url))
    else:
        out.print("no jobs found: install a package that names its jobs in the absreplay.jobs entry-point group, "
                  "or point ABS_JOBS_DIR at a folder of job files", markup=False)
    if store is None:
        out.print(f"catalog {safe_url(catalog_url)} has no schema yet: `absreplay db upgrade` creates it",
                  markup=False)
    if found.broken:
        # a line each, never folded by rich: a path and its error stay copyable and greppable
        out.print(Text("job files that failed to load", style="bold red"))
        for b in found.broken:
            out.print(Text(f"  {b.origin}: {b.error}"), soft_wrap=True)
