"""Test input as a user lands it: segment files written whole (a hidden temporary file renamed into
place, so inject never sees half a segment), and read back as the framework numbers records: a
partition's offset is its line number across its segments, in name order."""

from __future__ import annotations

import os
from pathlib import Path


def land(path: Path, lines: list[str]) -> None:
    """Segment ``path`` with these lines, renamed into place whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, path)


def partition_lines(partition_dir: Path) -> list[str]:
    """Every line of a partition's segments, in offset order (hidden files are not segments)."""
    lines: list[str] = []
    for segment in sorted(partition_dir.iterdir()):
        if not segment.name.startswith("."):
            lines += segment.read_text().splitlines()
    return lines
