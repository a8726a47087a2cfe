"""The demo: sample data lands in batches, barriers are injected, epochs are processed and
checkpoints finalized, then the audit is printed and the job's sink is checked against an
independent reference of exactly the records before the latest completed barrier.

The job is found by discovery like any job, and brings its sample data and reference itself
(``abs.Job(..., demo=...)``, ``coordinator.dataflow.demo_data``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from absreplay.commands import jvm_archive, views
from absreplay.commands.context import JobContext, job_context
from coordinator.dataflow.demo_data import DemoData
from absreplay.commands.submit import run_processing
from coordinator.sources import source
from coordinator.catalog.db import upgrade
from coordinator.dataflow.jobs import JobDefinition, SinkSpec
from coordinator.errors import AbsError, UsageError
from coordinator.settings import Settings

#: the job the demo runs
JOB = "wordcount"


def demo_data(job: JobDefinition) -> DemoData:
    """The sample data and reference ``job`` declares; UsageError (exit 2) when it declares none."""
    data = getattr(job.spec, "demo", None)
    if not isinstance(data, DemoData):
        raise UsageError(f"job {job.name!r} ({job.origin}) brings no demo data: declare it with "
                         f"abs.Job(..., demo=...), an object with land() and reference() (coordinator.dataflow.demo_data)")
    return data


def checked_sink(job: JobDefinition) -> SinkSpec:
    """The sink the reference describes: the job's first keyed one."""
    keyed = [s for s in job.sinks if s.key is not None]
    if not keyed:
        raise UsageError(f"job {job.name!r} has no keyed sink for the demo to check against its reference")
    return keyed[0]


def committed_rows(ctx: JobContext) -> dict[Any, Any]:
    """The checked sink's rows as readers see them now: key -> value (a tuple for several values)."""
    sink = checked_sink(ctx.job)
    rows = sink.target(ctx.settings.database_url).read().to_pylist()
    key = sink.key
    values = [c for c in sink.column_names if c not in key]

    def of(r: dict, names: Sequence[str]) -> Any:
        return r[names[0]] if len(names) == 1 else tuple(r[c] for c in names)

    return {of(r, key): of(r, values) for r in rows}


def top_rows(rows: Mapping[Any, Any], n: int = 5) -> list[tuple[Any, Any]]:
    """The ``n`` rows of largest value (a sink of counts: its most frequent keys); else the first by key."""
    if all(isinstance(v, int | float) for v in rows.values()):
        return sorted(rows.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return sorted(rows.items())[:n]


def check_exact(ctx: JobContext) -> tuple[bool, int, int]:
    """Does the sink equal the reference of exactly the records before the latest completed barrier?
    Returns (equal, records before it, keys of the reference)."""
    latest = ctx.store.latest_completed(ctx.job.name)
    cut = ctx.store.cut(ctx.job.name, latest.checkpoint_id) if latest else {}
    expected = demo_data(ctx.job).reference(source.input_dir(ctx.settings.data_dir, ctx.job.name), cut)
    return committed_rows(ctx) == dict(expected), sum(cut.values()), len(expected)


def demo_catalog(settings: Settings) -> tuple[JobContext, DemoData, Path]:
    """The demo job on a fresh, migrated catalog: its context, its data, and where its input lands."""
    upgrade(settings.database_url)
    ctx = job_context(JOB, settings)
    return ctx, demo_data(ctx.job), source.input_dir(settings.data_dir, JOB)


def demo_settings(name: str) -> Settings:
    """A fresh home ``$ABS_HOME/<name>`` for one demo. Its runs map Spark's classes from the archive in
    ``$ABS_HOME/jvm`` (``absreplay.commands.jvm_archive``), which outlives the demo's home."""
    base = Settings.from_env()
    home = base.home / name
    shutil.rmtree(home, ignore_errors=True)
    os.environ.setdefault(jvm_archive.ARCHIVE_ENV, str(base.home / "jvm"))
    return Settings.from_env({"ABS_HOME": str(home), "ABS_SPARK_MASTER": base.spark_master})


def run_demo(out: Console, batches: int, lines_per_batch: int) -> bool:
    settings = demo_settings("demo")
    out.print(f"[bold]ABS Replay demo[/] in {settings.home} (SQLite catalog, local Spark, local state)")
    ctx, data, input_dir = demo_catalog(settings)
    t0 = time.perf_counter()
    for batch in range(batches):
        landed = data.land(input_dir, batch, lines_per_batch)
        outcome = ctx.coordinator.inject()
        out.print(f"batch {batch}: {landed:,} records landed; barrier {outcome.checkpoint_id} injected")
        if batch % 2 == 1 or batch == batches - 1:
            out.print("processing pending epochs (spark-submit)...")
            code = run_processing(settings, [JOB, "--snapshot-mode", "async"])
            if code:
                raise AbsError(f"processing failed with exit code {code}")
            out.print(views.finalize_line(JOB, ctx.coordinator.finalize()))
            exact, records, keys = check_exact(ctx)
            out.print(f"  sink {'equals' if exact else 'DIFFERS FROM'} the reference ({records:,} records, "
                      f"{keys:,} keys)")
    return finish_demo(out, ctx, t0)


def finish_demo(out: Console, ctx: JobContext, t0: float, where: str = "") -> bool:
    """The audit table, the sink's top rows and the verdict line every demo ends with."""
    job = ctx.job.name
    views.print_history(out, ctx.store, job, views.history_rows(ctx.store, job))
    exact, records, keys = check_exact(ctx)
    top = top_rows(committed_rows(ctx))
    out.print(f"top of {checked_sink(ctx.job).name!r}: " + ", ".join(f"{k}={v}" for k, v in top))
    out.print(f"demo took {time.perf_counter() - t0:.1f}s{where}; audit it with: "
              f"sqlite3 {ctx.settings.database_url[10:]} 'SELECT * FROM snapshot_history'")
    verdict = "EXACT" if exact else "NOT EXACT"
    out.print(f"[bold]{verdict}[/]: the committed sink {'equals' if exact else 'differs from'} an independent "
              f"reference of {records:,} records ({keys:,} distinct keys)")
    return exact
