"""Inline SVG charts of a job's checkpoints over time, for the Airflow view and ``absreplay report``.

Self-contained markup (no script, no external file): the same chart renders in
Airflow's iframe and in a report opened from disk. One bar per checkpoint, in
id order; every bar carries a ``<title>`` (the hover text) with its numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from absreplay.commands.views import format_bytes, format_duration
from coordinator.catalog.audit import EpochPoint

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 760, 200, 64, 28, 12
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")
STATUS_COLORS = {"COMPLETED": "#59a14f", "FAILED": "#e15759", "PENDING": "#edc948", "SUBSUMED": "#bab0ac",
                 "SUPERSEDED": "#9c755f"}


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    svg: str


def _number(v: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.1f}{unit}"
    # small axes (an empty series' 0..1, the status chart) keep their half steps apart
    return f"{v:.1f}" if abs(v) < 10 and v != int(v) else f"{v:.0f}"


def stacked_bars(key: str, title: str, ids: list[int], series: dict[str, list[float]], unit: str,
                 colors: list[str] | None = None, notes: list[str] | None = None,
                 fmt: Callable[[float], str] | None = None) -> Chart:
    """One bar per checkpoint, split into ``series`` (stacked), with a legend and hover titles. ``fmt``: how
    a value reads on the axis and on hover (bytes and durations: the tables' own formatters)."""
    fmt = fmt or (lambda v: f"{_number(v)} {unit}".rstrip())
    plot_w, plot_h = WIDTH - LEFT - 8, HEIGHT - TOP - BOTTOM
    totals = [sum(vals[i] for vals in series.values()) for i in range(len(ids))]
    top = max(totals, default=0) or 1
    step = plot_w / max(len(ids), 1)
    colors = colors or list(PALETTE)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{key}" viewBox="0 0 {WIDTH} '
             f'{HEIGHT + 18}" width="{WIDTH}" height="{HEIGHT + 18}" role="img" aria-label="{escape(title)}">']
    for frac in (0, 0.5, 1):
        y = TOP + plot_h * (1 - frac)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - 8}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                     f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="10">'
                     f'{escape(fmt(top * frac))}</text>')
    for i, cid in enumerate(ids):
        x, y = LEFT + i * step, TOP + plot_h
        label = [f"checkpoint {cid}"] + [f"{name}: {fmt(vals[i])}" for name, vals in series.items()]
        if notes and notes[i]:
            label.append(notes[i])
        parts.append(f'<g class="bar" data-checkpoint="{cid}"><title>{escape(chr(10).join(label))}</title>')
        for n, vals in enumerate(series.values()):
            h = plot_h * vals[i] / top
            y -= h
            parts.append(f'<rect x="{x + step * 0.1:.1f}" y="{y:.1f}" width="{max(step * 0.8, 1):.1f}" '
                         f'height="{h:.1f}" fill="{colors[n % len(colors)]}"/>')
        parts.append("</g>")
        if len(ids) <= 30 or i % max(len(ids) // 15, 1) == 0:
            parts.append(f'<text x="{x + step / 2:.1f}" y="{TOP + plot_h + 12}" text-anchor="middle" '
                         f'font-size="9">{cid}</text>')
    x = LEFT
    for n, name in enumerate(series):
        parts.append(f'<rect x="{x}" y="{HEIGHT + 4}" width="10" height="10" fill="{colors[n % len(colors)]}"/>'
                     f'<text x="{x + 14}" y="{HEIGHT + 13}" font-size="11">{escape(name)}</text>')
        x += 24 + 7 * len(name)
    parts.append("</svg>")
    return Chart(key, title, "".join(parts))


def job_charts(points: list[EpochPoint]) -> list[Chart]:
    """The five charts of a job's history: snapshot phases, bytes written per operator, records, back-edge log,
    failures."""
    ids = [p.checkpoint_id for p in points]
    operators = sorted({op for p in points for op in p.state_bytes_by_operator})
    failures = [f"{p.failure_reason}: {p.failure_detail or ''}".strip(": ") if p.failure_reason else ""
                for p in points]
    statuses = sorted({p.status for p in points})
    return [
        # a run measures the phases once per checkpoint, for all its operators (``audit.snapshot_phases``)
        stacked_bars("durations", "Snapshot duration: alignment / sync / async", ids, {
            "alignment": [p.alignment_ms for p in points], "sync": [p.sync_ms for p in points],
            "async": [p.async_ms for p in points]}, "ms", fmt=format_duration),
        # acks record what each snapshot wrote (a delta: the changed keys only), not the state's whole size
        stacked_bars("state", "Bytes written per checkpoint, per operator (a full snapshot, or a delta of the "
                     "changed keys)", ids,
                     {op: [p.state_bytes_by_operator.get(op, 0) for p in points] for op in operators}, "B",
                     fmt=format_bytes),
        stacked_bars("records", "Records per checkpoint (those its commit carried)", ids,
                     {"records": [p.records for p in points]}, "rec"),
        stacked_bars("back_edge", "Back-edge log size", ids,
                     {"back-edge records": [p.back_edge_records for p in points]}, "rec", colors=["#b07aa1"]),
        stacked_bars("status", "Checkpoint status (failures with their reason on hover)", ids,
                     {s: [1 if p.status == s else 0 for p in points] for s in statuses}, "",
                     colors=[STATUS_COLORS.get(s, "#888") for s in statuses], notes=failures),
    ]
