"""Progress: a bar on a terminal, the same plain lines (and nothing else) in logs (issue 12)."""

from __future__ import annotations

import io

from rich.console import Console

from spark_jobs.run.progress import Steps

LINES = [f"  [{i}/3] epoch {i + 4}: 100 records from 1 segment(s) in 0.10s" for i in (1, 2, 3)]


def run(console: Console) -> str:
    with Steps(3, "wordcount: epochs", console=console) as steps:
        for line in LINES:
            steps.done(line)
    return console.file.getvalue()


def test_logs_get_exactly_the_lines() -> None:
    assert run(Console(file=io.StringIO(), force_terminal=False)) == "".join(f"{line}\n" for line in LINES)


def test_a_terminal_gets_the_lines_above_a_moving_bar() -> None:
    shown = run(Console(file=io.StringIO(), force_terminal=True, width=120))
    assert all(line in shown for line in LINES)
    assert "wordcount: epochs" in shown and "1/3" in shown and "2/3" in shown and "3/3" in shown
    assert "\x1b[" in shown  # drawn with terminal control sequences, removed when done (transient)
