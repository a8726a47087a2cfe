"""Every sink is an Airflow asset, named by its location; finalize and the recovery publish what they committed.

The DAG tasks declare the job's alias as their outlet and add one event per sink that received a commit
(``coordinator.sinks.commits`` says what was committed: checkpoints, rows, high-water marks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

def sink_alias_name(job: str) -> str:
    return f"abs_{job}_sink_commits"


def sink_alias(job: str):
    """The outlet of ``finalize`` and of the recovery: an alias, so that a run that committed nothing
    to a sink emits nothing for it (a declared Asset outlet gets an event on every success), and
    because a sink's URI may depend on the catalog URL, known only when the task runs."""
    from airflow.sdk import AssetAlias

    return AssetAlias(name=sink_alias_name(job), group="absreplay")


def sink_asset(uri: str):
    """A sink's asset: named by its URI (``SinkDeclaration.location``), so that ``Asset(uri)`` in a
    downstream DAG is this very asset."""
    from airflow.sdk import Asset

    return Asset(uri)


def sink_event_extra(job: str, commit: Mapping[str, Any]) -> dict[str, Any]:
    """What a sink's asset event carries: the checkpoints committed, their rows, the high-water marks."""
    return {"job": job, "sink": commit["sink"], "checkpoints": list(commit["checkpoints"]),
            "rows": commit["rows"], "high_water_marks": dict(commit["high_water_marks"])}


def publish_sink_commits(outlet_events: Any, job: str, sink_commits: list[Mapping[str, Any]]) -> None:
    """One asset event per sink that received a commit, through the job's alias; none for the others."""
    alias = sink_alias(job)
    for commit in sink_commits:
        extra = sink_event_extra(job, commit)
        outlet_events[alias].add(sink_asset(commit["uri"]), extra=extra)
        print(f"asset event {commit['uri']}: checkpoints {extra['checkpoints']}, {extra['rows']} row(s)", flush=True)
