"""What a job's text records must look like, checked when a segment is registered.

A record that does not fit its job's format becomes a dead letter at inject
time (like a line that is not UTF-8), so processing never sees it and nothing
is dropped silently. Formats:

- ``text``: any UTF-8 line (wordcount).
- ``edges``: ``src dst``, two integer vertex ids (64-bit, optional sign)
  separated by spaces or tabs, nothing else on the line (connected_components).

``EDGE_PATTERN`` is written so that Python's ``re`` and Java's regex engine
(Spark's ``rlike`` / ``regexp_extract``) read it the same way: ASCII classes
only, no ``\\d`` or ``\\s`` (which are Unicode-aware in Python).
"""

from __future__ import annotations

import re
from enum import StrEnum

EDGE_PATTERN = r"^[ \t\r\f\x0B]*([+-]?[0-9]+)[ \t\r\f\x0B]+([+-]?[0-9]+)[ \t\r\f\x0B]*$"
_EDGE = re.compile(EDGE_PATTERN.encode("ascii"))
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


class RecordFormat(StrEnum):
    TEXT = "text"
    EDGES = "edges"


def parse_edge(line: bytes) -> tuple[int, int] | None:
    """(src, dst) of an edge line, or None when the line is not one."""
    m = _EDGE.fullmatch(line)
    if m is None:
        return None
    src, dst = int(m.group(1)), int(m.group(2))
    if not (LONG_MIN <= src <= LONG_MAX and LONG_MIN <= dst <= LONG_MAX):
        return None
    return src, dst


def edge_problem(line: bytes) -> str | None:
    if _EDGE.fullmatch(line) is None:
        return "not an edge: expected two integer vertex ids 'src dst' separated by spaces or tabs"
    if parse_edge(line) is None:
        return "not an edge: a vertex id does not fit in a signed 64-bit integer"
    return None


def line_problem(record_format: RecordFormat, line: bytes) -> str | None:
    """Why a UTF-8 line is not a record of ``record_format`` (None: it is one)."""
    if record_format is RecordFormat.EDGES:
        return edge_problem(line)
    return None
