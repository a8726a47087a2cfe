"""`absreplay state` and `absreplay diff`: an operator's keyed state at any retained checkpoint,
and what changed between two (coordinator.checkpoints.state_reader; no Spark)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import pyarrow as pa
import pyarrow.parquet as pq
import typer
from rich.console import Console
from rich.table import Table

from absreplay.commands.context import job_context
from absreplay.options import checkpoint_option, count_option
from coordinator.checkpoints import state_reader
from coordinator.errors import UsageError

FORMATS = ("table", "json", "jsonl", "parquet")
Operator = Annotated[str | None, typer.Option("--operator", help="the stateful operator (default: the job's)")]
Limit = Annotated[int, count_option("--limit", help="rows shown in a table (json and parquet: all)")]
Format = Annotated[str, typer.Option("--format", help="table, json (one document: an array of rows), jsonl (one row a line) or parquet (needs --out)")]
Out = Annotated[Path | None, typer.Option("--out", help="file to write (parquet: required)")]

out = Console(width=None if sys.stdout.isatty() else 160)


def state(
    job: str,
    checkpoint: Annotated[int, checkpoint_option("--checkpoint", help="a completed, superseded or retained checkpoint")],
    operator: Operator = None,
    key: Annotated[str | None, typer.Option("--key", help="only this key's row")] = None,
    fmt: Format = "table",
    output: Out = None,
    limit: Limit = 50,
) -> None:
    """The keyed state of an operator at a checkpoint, as the restore would see it ("updated": the
    checkpoint whose epoch last changed the row)."""
    _check_format(fmt, output)
    ctx = job_context(job)
    rows = state_reader.state_at(ctx.store, ctx.job, checkpoint, operator, key)
    if key is not None and rows.num_rows == 0:
        out.print(f"{job}: key {key!r} is not in the state of {state_reader.check_operator(ctx.job, operator)} "
                  f"at checkpoint {checkpoint}")
        return
    title = f"{job}: {state_reader.check_operator(ctx.job, operator)} at checkpoint {checkpoint}"
    _emit(rows, fmt, output, limit, title)


def diff(
    job: str,
    from_id: Annotated[int, checkpoint_option("--from", help="the older checkpoint")],
    to_id: Annotated[int, checkpoint_option("--to", help="the newer checkpoint")],
    operator: Operator = None,
    fmt: Annotated[str, typer.Option("--format", help="table, json (one document: an array of changed keys) "
                                                      "or jsonl (one a line)")] = "table",
    limit: Limit = 20,
) -> None:
    """Keys added, removed and changed between two checkpoints' states."""
    if fmt not in ("table", "json", "jsonl"):
        raise UsageError(f"--format must be table, json or jsonl for diff, not {fmt!r}")
    ctx = job_context(job)
    d = state_reader.diff(ctx.store, ctx.job, from_id, to_id, operator)
    parts = {"added": d.added, "removed": d.removed, "changed": d.changed}
    if fmt in ("json", "jsonl"):
        print(_json([{"change": change, **row} for change, table in parts.items() for row in table.to_pylist()],
                    fmt), end="")
        return
    out.print(f"{job}: checkpoint {from_id} -> {to_id}: {d.added.num_rows:,} key(s) added, "
              f"{d.removed.num_rows:,} removed, {d.changed.num_rows:,} changed")
    for change, table in parts.items():
        if table.num_rows:
            out.print(_table(table, limit, f"{change} ({table.num_rows:,})"))


def _check_format(fmt: str, output: Path | None) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt == "parquet" and output is None:
        raise UsageError("--format parquet writes a file: give it with --out FILE")


def _emit(rows: pa.Table, fmt: str, output: Path | None, limit: int, title: str) -> None:
    if fmt == "parquet":
        pq.write_table(rows, output)
        out.print(f"{title}: {rows.num_rows:,} rows written to {output}")
    elif fmt in ("json", "jsonl"):
        text = _json(rows.to_pylist(), fmt)
        if output is None:
            print(text, end="")
        else:
            output.write_text(text)
    else:
        out.print(_table(rows, limit, f"{title} ({rows.num_rows:,} rows)"))


def _json(rows: list[dict], fmt: str) -> str:
    """``json``: one document, an array of the rows; ``jsonl``: a row a line (as the other commands'
    ``--json`` and ``--jsonl``)."""
    if fmt == "json":
        return json.dumps(rows, default=str) + "\n"
    return "".join(json.dumps(row, default=str) + "\n" for row in rows)


def _table(rows: pa.Table, limit: int, title: str) -> Table:
    table = Table(title=title + (f", first {limit}" if rows.num_rows > limit else ""))
    for name in rows.column_names:
        table.add_column(name, justify="right" if pa.types.is_integer(rows.schema.field(name).type) else "left")
    for row in rows.slice(0, limit).to_pylist():
        table.add_row(*(str(v) for v in row.values()))
    return table
