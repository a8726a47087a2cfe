"""``absreplay report JOB [--out DIR]``: the Airflow view's charts and history in one self-contained HTML file.

For users without the plugin: the same queries (``coordinator.catalog.audit``) and the
same inline SVG charts (``absreplay.commands.charts``), no script and nothing fetched,
so the file opens from disk or a mail attachment.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlalchemy import Engine

from absreplay.commands.charts import job_charts
from absreplay.commands.context import job_context
from absreplay.commands.views import format_bytes, format_duration, format_time
from coordinator.catalog import audit
from coordinator.checkpoints.lifecycle import CheckpointStatus
from coordinator.checkpoints.store import CheckpointStore

TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).parent.parent / "templates"),
                        autoescape=select_autoescape(["html"]))
TEMPLATES.filters["bytes"] = format_bytes
TEMPLATES.filters["duration"] = format_duration
TEMPLATES.filters["utc"] = format_time


@dataclass(frozen=True)
class Retention:
    """What of the job's history is retained. Retention (``CheckpointStore.subsume_beyond_retention``) marks
    completed checkpoints beyond the policy's newest ``retained`` SUBSUMED; so the retained ones, whose state
    can be restored, are exactly those still COMPLETED. The catalog keeps the rows of all the others."""

    total: int
    retained: int
    #: the job's policy: how many completed checkpoints retention keeps (None: the job has no catalog row)
    policy: int | None
    #: (status, count) of the rest of the history
    others: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, engine: Engine, job: str, statuses: list[str]) -> Retention:
        counts = Counter(statuses)
        row = CheckpointStore(engine).job(job)
        return cls(len(statuses), counts.pop(CheckpointStatus.COMPLETED, 0), row.retained if row else None,
                   tuple(sorted(counts.items())))

    def describe(self) -> str:
        keeps = (f": retention keeps the newest {self.policy} completed, and any whose sink output is not "
                 "committed yet" if self.policy else "")
        rest = "; the others: " + ", ".join(f"{n} {status}" for status, n in self.others) if self.others else ""
        return (f"{self.total} checkpoint(s) in the catalog's history, {self.retained} of them retained "
                f"(COMPLETED, restorable{keeps}){rest}")


def render(engine: Engine, job: str) -> tuple[str, Retention]:
    """The report's HTML, and what of the history is retained."""
    points = audit.timeline(engine, job)
    history = audit.checkpoint_page(engine, job, limit=max(len(points), 1))
    retention = Retention.of(engine, job, [r.status for r in history.rows])
    html = TEMPLATES.get_template("report.html").render(
        job=job, charts=job_charts(points), rows=history.rows, failures=[p for p in points if p.failure_reason],
        retention=retention, generated=format_time(datetime.now(UTC)))
    return html, retention


def write_report(engine: Engine, job: str, out_dir: Path) -> tuple[Path, Retention]:
    html, retention = render(engine, job)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"absreplay-{job}-report.html"
    path.write_text(html, encoding="utf-8")
    return path, retention


def report(
    job: str,
    out: Annotated[Path, typer.Option("--out", help="directory to write the report into")] = Path("."),
) -> None:
    """One self-contained HTML file with the job's charts and checkpoint history (what the Airflow view shows)."""
    ctx = job_context(job)
    path, retention = write_report(ctx.store.engine, job, out)
    print(f"{job}: report of {retention.total} checkpoint(s), {retention.retained} retained, written to {path}")
