"""`absreplay plan`'s table: each operator and sink of a changed job, how it changed, what an upgrade does."""

from __future__ import annotations

from dataclasses import asdict

from rich.table import Table

from coordinator.upgrades.job_plan import JobPlan
from coordinator.dataflow.changes import Change

#: a change's colour in the table: what needs the user stands out
_STYLE = {Change.UNCHANGED: "", Change.NEW: "green", Change.COMPATIBLE: "cyan", Change.INCOMPATIBLE: "bold red",
          Change.REMOVED: "yellow"}


def print_plan(out, plan: JobPlan) -> None:
    """The plan's header, its table of parts (when there is a version to compare with) and the next step."""
    if plan.changes is not None:
        out.print(f"{plan.job}: declaration version {plan.to_version} against checkpoint {plan.checkpoint_id}'s "
                  f"version {plan.from_version}")
        out.print(plan_table(plan))
    out.print(f"{plan.job}: {plan.next_step}", markup=False, highlight=False, soft_wrap=True)


def plan_table(plan: JobPlan) -> Table:
    table = Table(title=f"plan of {plan.job}")
    for col in ("part", "name", "change", "what changed", "the upgrade"):
        table.add_column(col)
    for p in plan.changes.parts:
        table.add_row(p.part, p.name, f"[{_STYLE[p.change]}]{p.change}[/]" if _STYLE[p.change] else str(p.change),
                      p.detail, p.effect)
    return table


def plan_json(plan: JobPlan) -> dict:
    return {"job": plan.job, "checkpoint_id": plan.checkpoint_id, "from_version": plan.from_version,
            "to_version": plan.to_version, "needs_upgrade": plan.needs_upgrade, "next_step": plan.next_step,
            "parts": [asdict(p) for p in plan.changes.parts] if plan.changes is not None else []}
