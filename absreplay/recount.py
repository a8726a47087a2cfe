"""An independent word count in plain Python: the reference the Spark results are checked against.

It reads the segment files on disk (not the catalog's segment table) and
counts the first ``cut[partition]`` records of each partition, in segment
name order. Lines that are not valid UTF-8 are skipped (they are dead letters).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

NON_WORD = re.compile(r"\W+")


def tokenize(line: str) -> list[str]:
    return [w for w in NON_WORD.split(line.lower()) if w]


def complete_segments(partition_dir: Path) -> list[Path]:
    return sorted(
        p for p in partition_dir.iterdir()
        if p.is_file() and not p.name.startswith((".", "_")) and not p.name.endswith(".tmp")
    )


def recount(input_dir: Path, cut: dict[str, int]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for partition, end in cut.items():
        seen = 0
        for seg in complete_segments(input_dir / partition):
            if seen >= end:
                break
            raw = seg.read_bytes().split(b"\n")
            if raw and raw[-1] == b"":
                raw.pop()
            for line in raw[: end - seen]:
                try:
                    counts.update(tokenize(line.decode("utf-8")))
                except UnicodeDecodeError:
                    pass
            seen += len(raw)
    return counts
