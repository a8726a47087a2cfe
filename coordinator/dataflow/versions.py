"""The version of a job's declaration: what a checkpoint's state and output were shaped by.

A version is a digest of the job's graph (operators and the edges between them), each stateful operator's
state (its kind, columns, identity and key), its sinks (kind, columns, upsert key, input) and its sources
(record format and fields), with a description of the same parts that a person can read. Parallelism is
left out: a run at another parallelism re-splits the same state by key group, so it is not a new version.
Each operator's parameters are in (a window's size, a digest of a filter's code): they shape the output.
Options of sources and sinks are left out too: they may hold secrets, and they do not shape the state.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from coordinator.catalog.models import JobVersionRow, utcnow
from coordinator.dataflow.graph import OperatorKind
from coordinator.dataflow.jobs import JobDefinition

#: hex characters of the digest kept: enough to tell a job's versions apart, short enough to read
DIGEST_CHARS = 12
#: how the parts name the keyed operators' kinds: as versions were first recorded, before ``OperatorKind`` took
#: the declaration's names, so that a version stored then still equals its job's declaration
RECORDED_KINDS = {OperatorKind.AGGREGATE: "keyed_reduce", OperatorKind.PROCESS: "stateful_map",
                  OperatorKind.WINDOW: "keyed_aggregate", OperatorKind.JOIN: "co_process",
                  OperatorKind.INTERVAL_JOIN: "co_process"}


@dataclass(frozen=True)
class JobVersion:
    digest: str
    #: the parts the digest is taken over (``describe``), as JSON objects
    parts: dict[str, Any]

    @property
    def summary(self) -> str:
        """One line: the operators (with their state's columns) and the sinks."""
        states = {s["operator"]: s for s in self.parts["states"]}
        ops = []
        for op in self.parts["operators"]:
            if op["kind"] in ("source", "sink"):
                continue
            state = states.get(op["name"])
            ops.append(f"{op['name']} ({op['kind']}" + (f": {', '.join(state['columns'])})" if state and
                                                      state["columns"] else ")"))
        sinks = [f"{s['name']} <- {s['input']}" for s in self.parts["sinks"]]
        return f"operators {'; '.join(ops)}; sinks {', '.join(sinks) or '-'}"


def describe(job: JobDefinition) -> dict[str, Any]:
    """The parts of ``job``'s declaration its version is taken over, as JSON reads them back (lists, not
    tuples), so that parts stored in the catalog compare equal to the same declaration's."""
    return json.loads(json.dumps({
        "operators": [{"name": o.name, "kind": RECORDED_KINDS.get(o.kind, str(o.kind))} for o in job.graph.operators],
        "edges": sorted([e.source, e.target, str(e.partitioning)] for e in job.graph.edges),
        "states": [{"operator": s.operator, "kind": s.kind,
                    "columns": None if s.columns is None else [f"{c}:{t}" for c, t in s.columns],
                    "identity": list(s.identity), "key": list(s.key)} for s in job.states],
        "sinks": [{"name": s.name, "kind": type(s.declaration).__name__, "columns": [f"{c}:{t}" for c, t in s.columns],
                   "key": None if s.key is None else list(s.key), "input": s.input} for s in job.sinks],
        "sources": [{"name": name, "format": type(fmt).__name__,
                     "fields": [f"{c}:{t}" for c, t in getattr(fmt, "fields", ())],
                     "time": getattr(fmt, "time_field", None), "id": getattr(fmt, "id_field", None)}
                    for name, fmt in job.sources],
        "params": job.params,
    }))


def version_of(job: JobDefinition) -> JobVersion:
    parts = describe(job)
    encoded = json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()
    return JobVersion(hashlib.sha256(encoded).hexdigest()[:DIGEST_CHARS], parts)


def record(s: Session, job: JobDefinition) -> str:
    """``job``'s version, added to ``job_versions`` if a run has not run it before; returns its digest."""
    version = version_of(job)
    if s.get(JobVersionRow, (job.name, version.digest)) is None:
        s.add(JobVersionRow(job=job.name, digest=version.digest, summary=version.summary,
                            parts=json.dumps(version.parts, sort_keys=True), first_run_at=utcnow()))
    return version.digest
