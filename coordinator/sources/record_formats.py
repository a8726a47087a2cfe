"""What a source's records look like (text, JSON lines, CSV), checked when a segment is registered.

A line that is not a record of its job becomes a dead letter at inject time
(like a line that is not UTF-8), with the reason the job's check gives, so
processing never sees it and nothing is dropped silently. A job declares its
check with its source (``absreplay.api.TextLines(check=...)``); without one,
every UTF-8 line is a record. Which segments hold id envelopes is declared too
(``TextLines(id_envelope=...)``), never inferred from a file's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coordinator.sources.event_time import TimestampError, event_time_ms
from coordinator.keywords import checked_keywords

#: why a line is not a record (None: it is one)
LineCheck = Callable[[bytes], "str | None"]


@checked_keywords()
@dataclass(frozen=True)
class TextLines:
    """Segment files of UTF-8 text, one record a line; ``check(line)`` returns why a line is not
    a record of the job (None: it is one). It runs once per line at inject, in plain Python.
    ``id_envelope``: segments whose name ends in this suffix hold one ``{"id", "ts", "line"}`` JSON
    envelope per line, a record with an id whose text is ``line`` (``coordinator.sources.source``); None:
    no segment does, every segment is plain text lines."""

    check: LineCheck | None = None
    id_envelope: str | None = None
    time_field = None

    def __post_init__(self) -> None:
        if self.id_envelope is not None and not self.id_envelope:
            raise ValueError("id_envelope: a file-name suffix such as '.jsonl', or None (no envelopes)")

    def envelope(self, name: str) -> bool:
        """Whether segment ``name`` holds id envelopes: the one place that decides it, from the declaration
        (a file's name alone never makes a segment an envelope)."""
        return self.id_envelope is not None and name.endswith(self.id_envelope)

    @property
    def checks_each_line(self) -> bool:
        return self.check is not None

    def problem(self, line: bytes) -> str | None:
        return None if self.check is None else self.check(line)


#: the types an event-time field can be declared with: epoch milliseconds, or a timestamp
TIME_TYPES = ("long", "int", "timestamp")


def _check_time_field(fields: tuple[tuple[str, str], ...], time_field: str | None) -> None:
    if time_field is not None and dict(fields).get(time_field) not in TIME_TYPES:
        raise ValueError(f"time field {time_field!r}: declare it among the fields as int (epoch ms) or as a "
                         "timestamp (datetime, or \"timestamp\": ISO-8601 strings in JSON and CSV)")


def _timestamp_problem(value: object) -> str | None:
    """Why ``value`` is no timestamp Spark reads the same way every time (None: it is one)."""
    try:
        event_time_ms(value, "timestamp")
    except TimestampError as exc:
        return str(exc)
    return None


def _fits(value: object, ddl_type: str) -> bool:
    if ddl_type in ("long", "int"):
        return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
    if ddl_type == "double":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if ddl_type == "boolean":
        return isinstance(value, bool)
    if ddl_type == "string":
        return isinstance(value, str)
    if ddl_type == "timestamp":
        return _timestamp_problem(value) is None
    if ddl_type.startswith("array<"):
        return isinstance(value, list) and all(_fits(v, ddl_type[6:-1]) for v in value)
    return False


def _csv_fits(text: str, ddl_type: str) -> bool:
    try:
        if ddl_type in ("long", "int"):
            # Python's int takes spaces (a CR too) and underscores around digits, Spark reads null from them
            return text.strip() == text and "_" not in text and -(2**63) <= int(text) < 2**63
        if ddl_type == "double":
            float(text)
            return True
        if ddl_type == "boolean":
            return text.lower() in ("true", "false")
    except ValueError:
        return False
    return ddl_type == "string"


@checked_keywords()
@dataclass(frozen=True)
class JsonLines:
    """One JSON object a line with the declared ``fields`` (name -> type; other keys are ignored).
    ``time_field``: the record's event time (windows): an integer field in epoch milliseconds, or a
    ``timestamp`` field, an ISO-8601 string read as Spark reads it (``coordinator.sources.event_time``).
    ``id_field``: the record's id (a string or integer field): a record whose id was seen already is a
    dead letter at inject (the id store: Bloom filters and exact ids per event-time window)."""

    fields: tuple[tuple[str, str], ...]
    time_field: str | None = None
    id_field: str | None = None

    def __post_init__(self) -> None:
        names = dict(self.fields)
        if self.id_field is not None and (names.get(self.id_field) not in ("string", "long", "int")
                                          or self.time_field is None):
            raise ValueError(f"id field {self.id_field!r}: declare it among the fields as str or int, and a "
                             "time field (the id store keeps ids per event-time window)")
        _check_time_field(self.fields, self.time_field)

    checks_each_line = True

    def problem(self, line: bytes) -> str | None:
        import json

        try:
            # text, not bytes: from bytes Python skips a BOM and reads UTF-16, where Spark reads nulls
            obj = json.loads(line.decode("utf-8"))
        except ValueError as exc:
            return f"not a JSON object: {exc}"
        if not isinstance(obj, dict):
            return "not a JSON object"
        for name, t in self.fields:
            if name not in obj or obj[name] is None:
                return f"field {name!r} is missing"
            if t == "timestamp":
                if why := _timestamp_problem(obj[name]):
                    return f"field {name!r} is not a timestamp ({why}): {obj[name]!r}"[:300]
            elif not _fits(obj[name], t):
                return f"field {name!r} is not a {t}: {obj[name]!r}"[:300]
        return None

    def envelope(self, name: str) -> bool:
        """Never: only a text source declares id envelopes (``TextLines.envelope``), whatever a file's name."""
        return False


@checked_keywords()
@dataclass(frozen=True)
class Csv:
    """Comma-separated values (``delimiter``), the declared ``fields`` in order, no header line,
    no quoting of the delimiter; ``time_field`` as for ``JsonLines``."""

    fields: tuple[tuple[str, str], ...]
    time_field: str | None = None
    delimiter: str = ","

    def __post_init__(self) -> None:
        _check_time_field(self.fields, self.time_field)

    checks_each_line = True

    def problem(self, line: bytes) -> str | None:
        parts = line.decode("utf-8").rstrip("\r").split(self.delimiter)
        if len(parts) != len(self.fields):
            return f"expected {len(self.fields)} fields separated by {self.delimiter!r}, found {len(parts)}"
        for (name, t), text in zip(self.fields, parts, strict=True):
            if t == "timestamp":
                if why := _timestamp_problem(text):
                    return f"field {name!r} is not a timestamp ({why}): {text!r}"[:300]
            elif not _csv_fits(text, t):
                return f"field {name!r} is not a {t}: {text!r}"[:300]
        return None

    def envelope(self, name: str) -> bool:
        """Never: only a text source declares id envelopes (``TextLines.envelope``), whatever a file's name."""
        return False


@checked_keywords()
@dataclass(frozen=True)
class ParquetFiles:
    """Parquet segment files, one record a row, with the declared ``fields`` (other columns are not
    read); ``time_field`` as for ``JsonLines`` (a ``timestamp`` column: Parquet's timestamps in ms or us,
    with a time zone or without one, then read in the session time zone, UTC). A file without a declared
    field, or with another type, is refused at inject, naming the file; a row with a null field is a
    dead letter."""

    fields: tuple[tuple[str, str], ...]
    time_field: str | None = None

    def __post_init__(self) -> None:
        _check_time_field(self.fields, self.time_field)

    checks_each_line = False

    def problem(self, line: bytes) -> str | None:
        return None

    def envelope(self, name: str) -> bool:
        """Never: only a text source declares id envelopes (``TextLines.envelope``), whatever a file's name."""
        return False


RecordFormat = TextLines | JsonLines | Csv | ParquetFiles
