"""Rich tables and one-line summaries for the command line."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.table import Table
from rich.text import Text

from coordinator.checkpoints.coordinator import FinalizeReport


def format_cut(cut: dict[str, int]) -> str:
    return ", ".join(f"{p}@{o}" for p, o in sorted(cut.items())) or "(no partitions yet)"


def format_bytes(n: float | None) -> str:
    """Bytes in binary units, wherever a size is shown (tables, the charts' axes and hover texts)."""
    n = n or 0
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def format_duration(ms: float | None) -> str:
    """Milliseconds as a person reads a duration: 850 ms, 1.2 s, 3 min 4 s, 2 h 5 min ("" for none)."""
    if ms is None:
        return ""
    if abs(ms) < 1000:
        return f"{ms:.0f} ms" if ms == int(ms) or abs(ms) >= 10 else f"{ms:.1f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def format_time(at: datetime | None) -> str:
    """A catalog time in UTC, saying so (the catalog keeps UTC; a naive value is UTC too)."""
    if at is None:
        return ""
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def history_rows(store, job: str) -> list[dict]:
    """``snapshot_history``'s rows of ``job`` with the parallelism and the job version of each checkpoint."""
    taken = {c.checkpoint_id: c for c in store.checkpoints(job)}
    return [{**row, "parallelism": taken[row["checkpoint_id"]].parallelism,
             "job_version": taken[row["checkpoint_id"]].job_version} for row in store.history(job)]


def print_history(out, store, job: str, rows: list[dict]) -> None:
    """The history table of ``rows``, then what each version of the declaration they were taken with holds."""
    from coordinator.catalog import audit

    starts = audit.version_starts(store.engine, job)
    out.print(history_table(job, rows, {v.checkpoint_id for v in starts[1:]}))
    shown = {r["checkpoint_id"] for r in rows}
    for v in starts:
        if v.checkpoint_id in shown:
            out.print(f"version {v.digest} (from checkpoint {v.checkpoint_id}): {v.summary}")


def history_table(job: str, rows: list[dict], changed: set[int] = frozenset()) -> Table:
    """``changed``: the checkpoints where a later version of the job's declaration starts, marked "(new)"."""
    table = Table(title=f"snapshot_history of {job}")
    # duration_ms runs from the barrier's injection to completion (not the snapshot's time); state_bytes is
    # what the checkpoint's snapshots wrote (a delta: the changed keys only), not the state's size
    numbers = ("checkpoint", "trigger → complete ms", "bytes written", "parallelism")
    for col in ("checkpoint", "status", "triggered", numbers[1], numbers[2], "acked", "parallelism", "version",
                "failure"):
        table.add_column(col, justify="right" if col in numbers else "left")
    for r in rows:
        version = r.get("job_version") or ""
        shown = version + (" (new)" if r["checkpoint_id"] in changed else "")
        table.add_row(
            str(r["checkpoint_id"]),
            r["status"],
            str(r["triggered_at"])[:19],
            "" if r["duration_ms"] is None else str(r["duration_ms"]),
            format_bytes(r["state_bytes"]),
            f"{r['acked_tasks']}/{r['total_tasks']}",
            "" if r.get("parallelism") is None else str(r["parallelism"]),
            shown,
            r["failure_reason"] or "",
        )
    return table


def finalize_line(job: str, r: FinalizeReport) -> str:
    def ids(xs: list[int]) -> str:
        return ",".join(map(str, xs)) or "-"

    return (
        f"{job}: committed {ids(r.committed)}; aborted {ids(r.aborted)}; expired {ids(r.expired)}; "
        f"subsumed {ids(r.subsumed)}; deleted {len(r.deleted_dirs)} state dir(s)"
        + "".join(f"\n  warning: {w}" for w in r.warnings)
    )


def recovery_line(r: dict) -> str:
    return (
        f"recovery #{r['id']} ({r['kind']}, {r['mode']}): {r['result']}; restored {r['from_checkpoint_id'] or '-'}, "
        f"now at {r['to_checkpoint_id'] or '-'}, superseded {r['superseded']}"
        + (f"\n  {r['detail']}" if r["detail"] else "")
    )


def recoveries_table(job: str, rows: list[dict]) -> Table:
    table = Table(title=f"recoveries of {job}")
    for col in ("id", "kind", "mode", "asked", "restored", "now at", "superseded", "started", "result"):
        table.add_column(col)
    table.add_column("detail", overflow="fold")  # whole, wrapped over lines (long words folded): it says why
    for r in rows:
        table.add_row(
            str(r["id"]), r["kind"], r["mode"], str(r["requested_checkpoint_id"] or "latest"),
            str(r["from_checkpoint_id"] or "-"), str(r["to_checkpoint_id"] or "-"), str(r["superseded"]),
            str(r["started_at"])[:19], r["result"], Text(r["detail"] or ""),
        )
    return table
