"""An independent reference for the README's clicks job (``tests/catalog/test_job_versions.clicks``, and its
versions as a user changes them): per user its clicks and last event time, per page its clicks, each sink at
its own high-water marks, counted from the segment files in plain Python."""

from __future__ import annotations

import json
from collections import Counter

from sqlalchemy import inspect, text

from absreplay_examples.recount import partition_records
from coordinator.sources.record_formats import TextLines

#: each sink the job has had: its table and key
SINKS = {"totals": ("clicks_per_user", "user"), "pages": ("clicks_per_page", "page")}


def records(ws, cut: dict[str, int]) -> list[dict]:
    """The click records below ``cut``, every partition in segment order."""
    return [json.loads(line) for partition, end in sorted(cut.items())
            for _, line in partition_records(ws.input_dir / partition, end, TextLines())]


def check(ws, marks_of) -> dict[str, tuple[int, int]]:
    """Sink -> (lost, duplicated): a key missing or with another value, a key that should not be there.
    Columns a version added (``last``) are judged where the table has them."""
    found = {}
    tables = set(inspect(ws.store.engine).get_table_names())
    for sink, (table, key) in SINKS.items():
        marks = marks_of(ws, sink)
        if not marks or table not in tables:
            continue
        with ws.store.engine.connect() as c:
            got = [dict(r._mapping) for r in c.execute(text(f"SELECT * FROM {table}"))]
        seen = records(ws, marks)
        expected = {k: {"clicks": n} for k, n in Counter(r[key] for r in seen).items()}
        if got and "last" in got[0]:
            for r in seen:
                expected[r[key]]["last"] = max(expected[r[key]].get("last", r["ts"]), r["ts"])
        rows = {r[key]: {c: r[c] for c in ("clicks", "last") if c in r} for r in got}
        found[sink] = (sum(1 for k, v in expected.items() if rows.get(k) != v),
                       sum(1 for k in rows if k not in expected))
    return found
