"""The partitioned segment-file source: ``<data_dir>/<job>/input/<partition>/<segment>``.

A segment is complete (and immutable) once it has its final name: names that
start with ``.`` or ``_`` or end with ``.tmp`` (or ``._COPYING_``, ``hdfs dfs
-put``'s) are still being written and are ignored. On an object store a segment
is uploaded whole under its final name: an object is not listed before its
upload completes. Segments are registered in the catalog in name order, which is their
arrival order; a segment's records (its lines) get consecutive offsets after
the partition's previous segments, so a record's sequence number is its
offset in its partition. A segment is scanned as a stream
(``coordinator.sources.segment_reader``), which also gives its size and content
checksum. Lines that are not valid UTF-8, or longer than the maximum line
length, become dead letters.

A text source may declare id envelopes (``TextLines(id_envelope=".jsonl")``):
its segments whose name ends in that suffix carry explicit record ids, one JSON
object per line, ``{"id": "<string>", "ts": <event time, seconds>, "line":
"<text>"}``. Their offsets work exactly as for text; scanning also returns each
record's id and event time for the id store (``coordinator.sources.id_store``), and a
line that is not such an object is a dead letter like a line that is not UTF-8.
How a segment is parsed comes from its source's declared format alone: a file's
name never makes a JSON-lines, CSV or Parquet segment an envelope.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.errors import SourceError
from coordinator.sources.event_time import event_time_ms
from coordinator.sources.record_formats import JsonLines, ParquetFiles, RecordFormat, TextLines
from coordinator.storage.location import Location
from coordinator.sources.segment_reader import MAX_LINE_ENV, LongLine, SegmentReader, checksum_and_tag_of, preview

# Names that round-trip unchanged through file URIs, so Spark's file paths map back to segments.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]*$")
# record_ids.record_id is VARCHAR(255); event times stay exact in JSON doubles and in BIGINT arithmetic
MAX_ID_LENGTH = 255
MAX_EVENT_TIME = 2**53 - 1


#: what a file being written is called: a temporary name of one's own, or what ``hdfs dfs -put`` writes first
INCOMPLETE_SUFFIXES = (".tmp", "._COPYING_")


def is_complete_segment(name: str) -> bool:
    return not (name.startswith((".", "_")) or name.endswith(INCOMPLETE_SUFFIXES))


@dataclass(frozen=True)
class BadRecord:
    offset_in_segment: int
    reason: str
    #: the record's first bytes (``segment_reader.preview``)
    payload: bytes


@dataclass(frozen=True, slots=True)
class IdRecord:
    """A valid record with an id (an id envelope, or a JSON line's id field): what the id store needs to
    deduplicate it."""

    offset_in_segment: int
    record_id: str
    ts: int


@dataclass(frozen=True)
class ScannedSegment:
    partition: str
    name: str
    path: Path | Location | None
    records: int
    bytes: int
    #: sha256 of the content read (``coordinator.sources.segment_reader``) and the file's mtime when opened
    checksum: str
    mtime_ns: int
    bad_records: list[BadRecord] = field(default_factory=list)
    #: segments of records with ids only (envelopes, an id field): every valid record, in offset order
    id_records: list[IdRecord] = field(default_factory=list)
    #: the content tag of the bytes read (``segment_reader.content_tag``)
    content_tag: str | None = None
    #: the id records' first bytes by offset in the segment, where the records cannot be read again by
    #: ``path`` (a Kafka partition's: ``coordinator.sources.kafka_source``); None: read them from the file
    previews: dict[int, bytes] | None = None


class BadIdRecordError(ValueError):
    """An id envelope line that is not a valid id record; the message is the dead letter's reason."""


def input_dir(data_dir: Path | Location, job: str) -> Path | Location:
    return data_dir / job / "input"


def job_partitions(root: Path | Location, sources: tuple[str, ...]) -> list[str]:
    """A job's partitions: the directories under ``root``, or with several sources ``<source>/<partition>``
    for the directories under ``root/<source>`` (a directory of no declared source is an error)."""
    if len(sources) <= 1:
        return list_partitions(root)
    unknown = [p for p in list_partitions(root) if p not in sources] if root.exists() else []
    if unknown:
        raise SourceError(f"{root} holds {', '.join(unknown)}, which are not sources of the job "
                          f"({', '.join(sources)}): put each partition under input/<source>/<partition>/")
    return [f"{name}/{p}" for name in sources for p in list_partitions(root / name)]


def list_partitions(root: Path | Location) -> list[str]:
    """Partition directory names under ``root`` (missing root: no partitions yet)."""
    if not root.exists():
        return []
    if not root.is_dir():
        raise SourceError(f"source input {root} is a file, expected a directory of partitions")
    names = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if not is_complete_segment(entry.name):
            continue
        if not entry.is_dir():
            raise SourceError(f"partition {entry} is a file; partitions must be directories of segment files")
        if not SAFE_NAME.match(entry.name):
            raise SourceError(f"partition name {entry.name!r} has characters outside [A-Za-z0-9._=+-]")
        names.append(entry.name)
    return names


def list_segments(partition_dir: Path | Location) -> list[str]:
    names = []
    for entry in sorted(partition_dir.iterdir(), key=lambda e: e.name):
        if not is_complete_segment(entry.name):
            continue
        if not entry.is_file():
            raise SourceError(f"segment {entry} is not a regular file")
        if not SAFE_NAME.match(entry.name):
            raise SourceError(f"segment name {entry.name!r} has characters outside [A-Za-z0-9._=+-]")
        names.append(entry.name)
    return names


def split_records(data: bytes) -> list[bytes]:
    """A segment's records are its lines; a final newline does not start another record.
    (``segment_reader.SegmentReader`` splits a stream by this rule, chunk by chunk.)"""
    if not data:
        return []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines


def _reject_constant(name: str) -> None:
    raise BadIdRecordError(f"not a JSON object: {name} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # Python keeps the last of duplicate keys, Spark's JSON reader the first: refuse to guess
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BadIdRecordError(f"duplicate key {key!r} in the JSON object")
            seen.add(key)
    return obj


JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def _json_type(obj: dict[str, object], key: str) -> str:
    if key not in obj:
        return "nothing (missing)"
    value = obj[key]
    return "null" if value is None else JSON_TYPES.get(type(value), type(value).__name__)


def _utf8_text(value: str, key: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadIdRecordError(f"{key!r} holds an unpaired surrogate (not encodable as UTF-8)") from None


def parse_id_record(line: bytes) -> tuple[str, int, str]:
    """(id, ts, line) of one id envelope line; ``BadIdRecordError`` says why the line is not a record.

    An integer id is its decimal string, so ``5`` and ``"5"`` are the same id.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadIdRecordError(f"not valid UTF-8 at byte {exc.start} of the line") from None
    try:
        obj = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
    except BadIdRecordError:
        raise
    except (ValueError, RecursionError) as exc:
        raise BadIdRecordError(f"not a JSON object: {str(exc).splitlines()[0]}") from None
    if not isinstance(obj, dict):
        raise BadIdRecordError(f"not a JSON object: the line is a JSON {JSON_TYPES.get(type(obj), 'value')}")
    rid, ts, body = obj.get("id"), obj.get("ts"), obj.get("line")
    if type(rid) is int:
        rid = str(rid)
    if not isinstance(rid, str):
        raise BadIdRecordError(f"'id' must be a string or an integer, got {_json_type(obj, 'id')}")
    if not 1 <= len(rid) <= MAX_ID_LENGTH:
        raise BadIdRecordError(f"'id' must be 1 to {MAX_ID_LENGTH} characters long, got {len(rid)}")
    if "\x00" in rid:
        raise BadIdRecordError("'id' contains a NUL character")
    _utf8_text(rid, "id")
    if type(ts) is not int:
        raise BadIdRecordError(f"'ts' must be an integer (event time in seconds), got {_json_type(obj, 'ts')}")
    if not 0 <= ts <= MAX_EVENT_TIME:
        raise BadIdRecordError(f"'ts' must be between 0 and 2**53 - 1, got {ts}")
    if not isinstance(body, str):
        raise BadIdRecordError(f"'line' must be a string, got {_json_type(obj, 'line')}")
    _utf8_text(body, "line")
    return rid, ts, body


def _id_record(i: int, line: bytes, lines: TextLines) -> IdRecord | BadRecord:
    """An id envelope line: an id record whose ``line`` is a record of the job (``lines``), or a bad record."""
    try:
        rid, ts, body = parse_id_record(line)
        problem = lines.problem(body.encode("utf-8"))
        if problem:
            raise BadIdRecordError(f"'line' is {problem}")
    except BadIdRecordError as exc:
        return BadRecord(offset_in_segment=i, reason=str(exc), payload=preview(line))
    return IdRecord(i, rid, ts)


def field_id_record(i: int, line: bytes, fmt: JsonLines) -> IdRecord | BadRecord:
    """A JSON line (already checked against its fields) as an id record: its id field, and its event
    time (ms, or a timestamp read as Spark reads it) in seconds, the id store's unit."""
    obj = json.loads(line)
    rid, ts = obj[fmt.id_field], event_time_ms(obj[fmt.time_field], dict(fmt.fields)[fmt.time_field])
    rid = str(rid) if type(rid) is int else rid
    if not 1 <= len(rid) <= MAX_ID_LENGTH or "\x00" in rid:
        return BadRecord(i, f"id field {fmt.id_field!r} must be 1 to {MAX_ID_LENGTH} characters, no NUL",
                         preview(line))
    if not 0 <= ts // 1000 <= MAX_EVENT_TIME:
        return BadRecord(i, f"time field {fmt.time_field!r} must be a non-negative epoch time in ms "
                         "(not before 1970)", preview(line))
    return IdRecord(i, rid, ts // 1000)


def _text_problem(line: bytes, lines: TextLines) -> str | None:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8 at byte {exc.start} of the line"
    return lines.problem(line)


def long_line_reason(line: LongLine, limit: int) -> str:
    return f"line of {line.length:,} bytes is longer than the maximum of {limit:,} bytes ({MAX_LINE_ENV})"


def scan_segment(
    partition: str, path: Path | Location, lines: RecordFormat | None = None, max_line: int | None = None
) -> ScannedSegment:
    """Count a segment's records, streamed (``coordinator.sources.segment_reader``), with its size, checksum and
    mtime. Bad records (dead letters): lines longer than the maximum, lines that are not UTF-8 or not of
    the job's records (``coordinator.sources.record_formats``), and in the id envelopes the format declares
    (``TextLines.envelope``) lines that are not id records. ``lines``: the source's declared format (None:
    plain text lines)."""
    lines = lines or TextLines()
    if isinstance(lines, ParquetFiles):
        return scan_parquet(partition, path, lines)
    reader = SegmentReader(path, max_line)
    id_segment = lines.envelope(path.name)
    check_each = id_segment or lines.checks_each_line
    records = 0
    bad: list[BadRecord] = []
    ids: list[IdRecord] = []
    for batch, has_long in reader.batches():
        if not (check_each or has_long) and _is_utf8(b"\n".join(batch)):
            records += len(batch)  # the common case: a chunk of plain UTF-8 text, decoded at once
            continue
        for i, line in enumerate(batch, records):
            if isinstance(line, LongLine):
                bad.append(BadRecord(i, long_line_reason(line, reader.max_line), preview(line)))
            elif id_segment:
                found = _id_record(i, line, lines)
                if isinstance(found, IdRecord):
                    ids.append(found)
                else:
                    bad.append(found)
            elif problem := _text_problem(line, lines):
                bad.append(BadRecord(i, problem, preview(line)))
            elif getattr(lines, "id_field", None):
                found = field_id_record(i, line, lines)
                if isinstance(found, IdRecord):
                    ids.append(found)
                else:
                    bad.append(found)
        records += len(batch)
    return ScannedSegment(partition, path.name, path, records, reader.bytes, reader.checksum, reader.mtime_ns,
                          bad, ids, reader.content_tag)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_payloads(path: Path | Location, offsets_in_segment: set[int]) -> dict[int, bytes]:
    """Previews of some of a segment's records (for dead letters decided after the scan), streamed."""
    found: dict[int, str] = {}
    last = max(offsets_in_segment, default=-1)
    for i, line in enumerate(SegmentReader(path).lines()):
        if i in offsets_in_segment:
            found[i] = preview(line)
        if i >= last:
            break
    return found


def source_subtask(partition: str, parallelism: int) -> int:
    """Which source subtask reads a partition: stable when partitions are added."""
    return zlib.crc32(partition.encode()) % parallelism


def scan_parquet(partition: str, path: Path | Location, fmt: ParquetFiles) -> ScannedSegment:
    """A Parquet segment: its rows (from the footer), size, checksum and mtime; a row with a null in a
    declared field is a dead letter. SourceError (exit 2) for a file that is not Parquet or lacks a
    declared field or has it with another type: nothing of the batch is registered."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    stat = path.stat()
    try:
        parquet = pq.ParquetFile(path.fs.open_input_file(path.path) if isinstance(path, Location) else path)
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(f"segment {path} is not a Parquet file: {str(exc).splitlines()[0]}") from None
    rows, nulls = checked_parquet_rows(parquet, fmt.fields, f"segment {path}")
    bad = [BadRecord(i, reason, payload) for i, reason, payload in nulls]
    checksum, tag = checksum_and_tag_of(path)
    return ScannedSegment(partition, path.name, path, rows.num_rows, stat.st_size, checksum, stat.st_mtime_ns, bad,
                          [], tag)


def checked_parquet_rows(parquet, fields, where: str) -> tuple[Any, list[tuple[int, str, bytes]]]:
    """The declared columns of a ``pyarrow.parquet.ParquetFile`` (a segment, a Delta table's file), and its
    rows with a null in one: (row index, reason, payload) each, dead letters. SourceError naming ``where`` for
    a missing declared column or one of another type (``parquet_column_problem``)."""
    import pyarrow.compute as pc

    schema = parquet.schema_arrow
    for name, t in fields:
        if name not in schema.names:
            raise SourceError(f"{where} has no column {name!r} (the job declares {fields})")
        if problem := parquet_column_problem(parquet, name, t):
            raise SourceError(f"{where}: column {name!r} {problem}")
    rows = parquet.read(columns=[name for name, _ in fields])
    bad: list[tuple[int, str, bytes]] = []
    valid = None
    for column in rows.columns:
        mask = column.is_valid()
        valid = mask if valid is None else pc.and_(valid, mask)
    if valid is not None and rows.num_rows and not pc.all(valid).as_py():
        for i in pc.indices_nonzero(pc.invert(valid)).to_pylist():
            row = rows.slice(i, 1).to_pylist()[0]
            nulls = ", ".join(k for k, v in row.items() if v is None)
            bad.append((i, f"field(s) {nulls} are null", preview(json.dumps(row, default=str).encode())))
    return rows, bad


def parquet_column_problem(parquet, name: str, declared: str) -> str | None:
    """Why column ``name`` of a ``pyarrow.parquet.ParquetFile`` is not what Spark reads as the ``declared``
    type (None: it is). A timestamp: Parquet's INT96, or INT64 timestamps in milliseconds or microseconds,
    with a time zone (an instant) or without (a wall-clock time, read in the session time zone, UTC);
    Spark refuses nanoseconds."""
    import pyarrow as pa

    from coordinator.types import arrow_type

    found = parquet.schema_arrow.field(name).type
    if declared == "timestamp" and pa.types.is_timestamp(found):
        column = next(c for c in (parquet.schema.column(i) for i in range(len(parquet.schema))) if c.path == name)
        if column.physical_type == "INT96" or json.loads(column.logical_type.to_json()).get("timeUnit") in (
                "milliseconds", "microseconds"):
            return None
        return ("holds timestamps in nanoseconds, which Spark does not read: write them in microseconds "
                "(pyarrow.parquet.write_table(..., coerce_timestamps='us', allow_truncated_timestamps=True), "
                "pandas' to_parquet takes the same options)")
    wanted = arrow_type(declared)
    if found == wanted or (pa.types.is_string(wanted) and pa.types.is_large_string(found)):
        return None
    return f"is {found}, the job declares {declared}"
