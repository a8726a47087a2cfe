"""``absreplay report JOB [--out DIR]``: the Airflow view's charts and history in one self-contained HTML file.

For users without the plugin: the same queries (``coordinator.catalog.audit``) and the
same inline SVG charts (``absreplay.charts``), no script and nothing fetched,
so the file opens from disk or a mail attachment.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlalchemy import Engine

from absreplay.charts import job_charts
from absreplay.context import job_context
from absreplay.views import format_bytes
from coordinator.catalog import audit

TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                        autoescape=select_autoescape(["html"]))
TEMPLATES.filters["bytes"] = format_bytes


def render(engine: Engine, job: str) -> str:
    points = audit.timeline(engine, job)
    history = audit.checkpoint_page(engine, job, limit=max(len(points), 1))
    return TEMPLATES.get_template("report.html").render(
        job=job, charts=job_charts(points), rows=history.rows, failures=[p for p in points if p.failure_reason],
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))


def write_report(engine: Engine, job: str, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"absreplay-{job}-report.html"
    path.write_text(render(engine, job), encoding="utf-8")
    return path


def report(
    job: str,
    out: Annotated[Path, typer.Option("--out", help="directory to write the report into")] = Path("."),
) -> None:
    """One self-contained HTML file with the job's charts and checkpoint history (what the Airflow view shows)."""
    ctx = job_context(job)
    path = write_report(ctx.store.engine, job, out)
    print(f"{job}: report of {len(audit.timeline(ctx.store.engine, job))} checkpoint(s) written to {path}")
