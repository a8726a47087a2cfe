"""Test input as a user lands it: segment files written whole under their final name (a hidden temporary
file renamed into place, or on an object store one PUT: ``coordinator.storage.location.write_whole``), so
inject never sees half a segment, and read back as the framework numbers records: a partition's offset is
its line number across its segments, in name order."""

from __future__ import annotations

from pathlib import Path

from coordinator.storage.location import Location, write_whole


def land(path: Path | Location, lines: list[str]) -> None:
    """Segment ``path`` with these lines, landed whole."""
    write_whole(path, "".join(line + "\n" for line in lines).encode())


def partition_lines(partition_dir: Path | Location) -> list[str]:
    """Every line of a partition's segments, in offset order (hidden files are not segments)."""
    lines: list[str] = []
    for segment in sorted(partition_dir.iterdir(), key=lambda s: s.name):
        if not segment.name.startswith("."):
            lines += segment.read_bytes().decode().splitlines()
    return lines
