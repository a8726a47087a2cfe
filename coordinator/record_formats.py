"""Which text lines of a job's segments are records, checked when a segment is registered.

A line that is not a record of its job becomes a dead letter at inject time
(like a line that is not UTF-8), with the reason the job's check gives, so
processing never sees it and nothing is dropped silently. A job declares its
check with its source (``absreplay.api.TextLines(check=...)``); without one,
every UTF-8 line is a record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: why a line is not a record (None: it is one)
LineCheck = Callable[[bytes], "str | None"]


@dataclass(frozen=True)
class TextLines:
    """Segment files of UTF-8 text, one record a line; ``check(line)`` returns why a line is not
    a record of the job (None: it is one). It runs once per line at inject, in plain Python."""

    check: LineCheck | None = None

    @property
    def checks_each_line(self) -> bool:
        return self.check is not None

    def problem(self, line: bytes) -> str | None:
        return None if self.check is None else self.check(line)
