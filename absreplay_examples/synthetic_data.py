"""Input for the synthetic job, landed as segment files, and its result recomputed in plain Python.

``land`` writes one segment per source partition for a batch: CSV lines
``key,value``, keys uniform over ``0..keys-1``, values uniform over
``0..MAX_VALUE``. Deterministic for a seed (numpy's PCG64 seeded with
(seed, batch, partition)); a segment is written under a temporary name and
renamed, as a real producer must do.

``reference`` is the check the job is judged by: the three aggregates of
``absreplay_examples.synthetic`` recomputed with dicts from the segment files,
epoch by epoch between the given cuts, sharing no code with the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from absreplay_examples.recount import partition_records
from absreplay_examples.sample_data import land_segment

MAX_VALUE = 999
#: as the job's: how many keys of one level make one key of the next
FAN_IN = 10


def land(input_dir: Path | str, batch: int, records: int, keys: int, partitions: int = 2, seed: int = 7) -> int:
    """Land batch ``batch``: ``records`` records in all, split evenly over ``partitions`` partitions
    (``p0``, ``p1``, ...), one segment each. Returns the number of records landed."""
    input_dir = Path(input_dir)
    total = 0
    for p in range(partitions):
        n = records // partitions + (1 if p < records % partitions else 0)
        rng = np.random.default_rng([seed, batch, p])
        key = rng.integers(0, keys, n)
        value = rng.integers(0, MAX_VALUE + 1, n)
        lines = [f"{k},{v}" for k, v in zip(key.tolist(), value.tolist(), strict=True)]
        land_segment(input_dir / f"p{p}", f"seg-{batch:06d}.csv", lines)
        total += n
    return total


def _div(a: int, b: int) -> int:
    """Integer division truncated towards zero (SQL's ``div``), not Python's floor division."""
    q = abs(a) // b
    return q if a >= 0 else -q


def _record(line: bytes) -> tuple[int, int] | None:
    """(key, value) of a CSV record; None for a line the source dead-letters."""
    try:
        parts = line.decode("utf-8").rstrip("\r").split(",")
        if len(parts) != 2:
            return None
        key, value = int(parts[0]), int(parts[1])
    except (UnicodeDecodeError, ValueError):
        return None
    return (key, value) if all(-(2**63) <= x < 2**63 for x in (key, value)) else None


@dataclass
class SyntheticState:
    """Each level's state: k1 -> (total, records), k2 -> (total, updates), k3 -> (total, updates, peak)."""

    per_key: dict[int, tuple[int, int]] = field(default_factory=dict)
    per_group: dict[int, tuple[int, int]] = field(default_factory=dict)
    per_bucket: dict[int, tuple[int, int, int]] = field(default_factory=dict)

    def epoch(self, records: list[tuple[int, int]]) -> None:
        """One epoch: each level receives the new rows of the keys the level before changed in it."""
        changed_keys: set[int] = set()
        for k1, value in records:
            total, n = self.per_key.get(k1, (0, 0))
            self.per_key[k1] = (total + value, n + 1)
            changed_keys.add(k1)
        changed_groups: set[int] = set()
        for k1 in changed_keys:
            k2 = _div(k1, FAN_IN)
            total, n = self.per_group.get(k2, (0, 0))
            self.per_group[k2] = (total + self.per_key[k1][0], n + 1)
            changed_groups.add(k2)
        for k2 in changed_groups:
            k3 = _div(k2, FAN_IN)
            received = self.per_group[k2][0]
            total, n, peak = self.per_bucket.get(k3, (0, 0, received))
            self.per_bucket[k3] = (total + received, n + 1, max(peak, received))


def reference_records(input_dir: Path, start: dict[str, int], end: dict[str, int]) -> list[tuple[int, int]]:
    """The records between two cuts, in the order ``reference`` folds them."""
    records = []
    for p in sorted(end):
        lines = partition_records(input_dir / p, end[p])
        records += [r for _, line in lines[start.get(p, 0):end[p]] if (r := _record(line)) is not None]
    return records


def reference(input_dir: Path, cuts: Sequence[dict[str, int]]) -> SyntheticState:
    """The job's state after the epochs ending at ``cuts`` (in order; the first starts at offset 0
    of every partition), from the segment files under ``input_dir`` alone."""
    if not cuts:
        return SyntheticState()
    last = cuts[-1]
    lines = {p: partition_records(input_dir / p, end) for p, end in last.items()}
    state = SyntheticState()
    start: dict[str, int] = {}
    for cut in cuts:
        epoch = []
        for p in sorted(lines):
            first, end = start.get(p, 0), cut.get(p, 0)
            epoch += [r for _, line in lines[p][first:end] if (r := _record(line)) is not None]
            start[p] = max(first, end)
        state.epoch(epoch)
    return state
