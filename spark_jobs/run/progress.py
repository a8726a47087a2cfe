"""Progress of long work: a bar in a terminal, plain lines in logs (rich; no Spark here).

    with Steps(len(plans), f"{job.name}: epochs") as steps:
        for plan in plans:
            ...
            steps.done(f"  [{i}/{len(plans)}] epoch {plan.checkpoint_id}: ...")

On a terminal the line is printed above a live bar (done/total, elapsed, time left);
anywhere else (a pipe, a log file, Airflow's task log) the same line is printed
plainly and nothing else, so logs read exactly as before.
"""

from __future__ import annotations

import sys
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class Steps:
    def __init__(self, total: int, description: str, console: Console | None = None) -> None:
        self.console = console or Console(file=sys.stdout)
        self.total, self.description = total, description
        self._progress: Progress | None = None
        self._task = None

    @property
    def live(self) -> bool:
        return self.console.is_terminal

    def __enter__(self) -> Steps:
        if self.live:
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("left"), TimeRemainingColumn(), console=self.console, transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=self.total)
        return self

    def done(self, line: str) -> None:
        """One step finished: its line, and the bar moves on."""
        if self._progress is None:
            print(line, file=self.console.file, flush=True)
            return
        self._progress.console.print(line, highlight=False, markup=False)
        self._progress.advance(self._task)
        self._progress.refresh()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
