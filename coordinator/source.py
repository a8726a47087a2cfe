"""The partitioned segment-file source: ``<data_dir>/<job>/input/<partition>/<segment>``.

A segment is complete (and immutable) once it has its final name: names that
start with ``.`` or ``_`` or end with ``.tmp`` are still being written and are
ignored. Segments are registered in the catalog in name order, which is their
arrival order; a segment's records (its lines) get consecutive offsets after
the partition's previous segments, so a record's sequence number is its
offset in its partition. Lines that are not valid UTF-8 become dead letters.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.errors import SourceError

# Names that round-trip unchanged through file URIs, so Spark's file paths map back to segments.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]*$")
PAYLOAD_PREVIEW = 200


def is_complete_segment(name: str) -> bool:
    return not (name.startswith((".", "_")) or name.endswith(".tmp"))


@dataclass(frozen=True)
class BadRecord:
    offset_in_segment: int
    reason: str
    payload: str


@dataclass(frozen=True)
class ScannedSegment:
    partition: str
    name: str
    path: Path
    records: int
    bytes: int
    bad_records: list[BadRecord] = field(default_factory=list)


def input_dir(data_dir: Path, job: str) -> Path:
    return data_dir / job / "input"


def list_partitions(root: Path) -> list[str]:
    """Partition directory names under ``root`` (missing root: no partitions yet)."""
    if not root.exists():
        return []
    if not root.is_dir():
        raise SourceError(f"source input {root} is a file, expected a directory of partitions")
    names = []
    for entry in sorted(root.iterdir()):
        if not is_complete_segment(entry.name):
            continue
        if not entry.is_dir():
            raise SourceError(f"partition {entry} is a file; partitions must be directories of segment files")
        if not SAFE_NAME.match(entry.name):
            raise SourceError(f"partition name {entry.name!r} has characters outside [A-Za-z0-9._=+-]")
        names.append(entry.name)
    return names


def list_segments(partition_dir: Path) -> list[str]:
    names = []
    for entry in sorted(partition_dir.iterdir()):
        if not is_complete_segment(entry.name):
            continue
        if not entry.is_file():
            raise SourceError(f"segment {entry} is not a regular file")
        if not SAFE_NAME.match(entry.name):
            raise SourceError(f"segment name {entry.name!r} has characters outside [A-Za-z0-9._=+-]")
        names.append(entry.name)
    return names


def split_records(data: bytes) -> list[bytes]:
    """A segment's records are its lines; a final newline does not start another record."""
    if not data:
        return []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines


def scan_segment(partition: str, path: Path) -> ScannedSegment:
    data = path.read_bytes()
    try:
        data.decode("utf-8")
        records = len(split_records(data))
        bad: list[BadRecord] = []
    except UnicodeDecodeError:
        lines = split_records(data)
        records = len(lines)
        bad = []
        for i, line in enumerate(lines):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad.append(
                    BadRecord(
                        offset_in_segment=i,
                        reason=f"not valid UTF-8 at byte {exc.start} of the line",
                        payload=line[:PAYLOAD_PREVIEW].decode("utf-8", errors="backslashreplace"),
                    )
                )
    return ScannedSegment(partition, path.name, path, records, len(data), bad)


def source_subtask(partition: str, parallelism: int) -> int:
    """Which source subtask reads a partition: stable when partitions are added."""
    return zlib.crc32(partition.encode()) % parallelism
