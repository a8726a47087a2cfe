"""An independent word count in plain Python: the reference the Spark results are checked against.

It reads the segment files on disk (not the catalog's segment table) and
counts the first ``cut[partition]`` records of each partition, in segment
name order. Lines that are not valid UTF-8, and lines longer than the maximum
line length, are skipped (they are dead letters).

Records of the id envelopes the job declares (the wordcount job's ``.jsonl``
segments, ``WORDCOUNT_LINES``) carry ids: a line counts when it is a valid
record (a JSON object with a string or integer ``id``, an integer ``ts`` and a
string ``line``) whose id was not seen before and that is not late. "Before"
is arrival order, which is how the id store sees records: barrier by barrier
(``earlier_cuts`` then ``cut``), and within a barrier partitions in name order,
segments in name order, lines in order. The rules are the id store's
(``coordinator.sources.id_store``), re-implemented here without Bloom filters or SQL.
Without ``earlier_cuts`` everything before ``cut`` is one batch, which is
exact as long as no record was late, no id came back after its window was
forgotten, and copies of an id carry the same line.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from coordinator.sources.id_store import IdStorePolicy
from coordinator.sources.record_formats import TextLines
from coordinator.sources.segment_reader import max_line_bytes

NON_WORD = re.compile(r"\W+")
MAX_ID_LENGTH = 255
MAX_EVENT_TIME = 2**53 - 1
#: the wordcount job's source, as absreplay_examples.wordcount declares it (not imported: no Spark here)
WORDCOUNT_LINES = TextLines(id_envelope=".jsonl")


def tokenize(line: str) -> list[str]:
    return [w for w in NON_WORD.split(line.lower()) if w]


def complete_segments(partition_dir: Path) -> list[Path]:
    return sorted(
        p for p in partition_dir.iterdir()
        if p.is_file() and not p.name.startswith((".", "_")) and not p.name.endswith(".tmp")
    )


def partition_records(partition_dir: Path, end: int, lines: TextLines = WORDCOUNT_LINES
                      ) -> list[tuple[bool, bytes]]:
    """The first ``end`` records of a partition: (from an id envelope segment of ``lines``?, raw line)."""
    records: list[tuple[bool, bytes]] = []
    for seg in complete_segments(partition_dir):
        if len(records) >= end:
            break
        raw = seg.read_bytes().split(b"\n")
        if raw and raw[-1] == b"":
            raw.pop()
        jsonl = lines.envelope(seg.name)
        records.extend((jsonl, line) for line in raw[: end - len(records)])
    return records


class _Invalid(Exception):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    if len({k for k, _ in pairs}) != len(pairs):
        raise _Invalid
    return dict(pairs)


def _no_constants(_: str) -> None:
    raise _Invalid


def _utf8(text: str) -> str:
    text.encode("utf-8")  # raises on unpaired surrogates
    return text


def id_record(line: bytes) -> tuple[str, int, str] | None:
    """(id, ts, line) of a valid id envelope, None for a line the source dead-letters."""
    try:
        obj = json.loads(line.decode("utf-8"), object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
        rid, ts, text = obj["id"], obj["ts"], obj["line"]
        if type(rid) is int:
            rid = str(rid)
        if not (isinstance(rid, str) and 0 < len(rid) <= MAX_ID_LENGTH and "\x00" not in rid):
            return None
        if type(ts) is not int or not 0 <= ts <= MAX_EVENT_TIME or not isinstance(text, str):
            return None
        return _utf8(rid), ts, _utf8(text)
    except (_Invalid, ValueError, RecursionError, TypeError, KeyError):
        return None


class ReferenceIds:
    """The id store's decisions with a dict: windows, watermark, lateness, forgetting."""

    def __init__(self, policy: IdStorePolicy) -> None:
        self.policy = policy
        self.window_of: dict[str, int] = {}
        self.watermark: int | None = None
        self.max_ts: int | None = None
        self.batch_max: int | None = None

    def admit(self, rid: str, ts: int) -> bool:
        self.batch_max = ts if self.batch_max is None else max(self.batch_max, ts)
        size = self.policy.window_seconds
        start = ts - ts % size
        if self.watermark is not None and start + size <= self.watermark:
            return False  # late
        if rid in self.window_of:
            return False  # duplicate
        self.window_of[rid] = start
        return True

    def end_batch(self) -> None:
        if self.batch_max is None:
            return
        self.max_ts = self.batch_max if self.max_ts is None else max(self.max_ts, self.batch_max)
        mark = self.max_ts - self.policy.allowed_lateness_seconds
        self.watermark = mark if self.watermark is None else max(self.watermark, mark)
        size = self.policy.window_seconds
        self.window_of = {r: w for r, w in self.window_of.items() if w + size > self.watermark}
        self.batch_max = None


def kept_records(
    input_dir: Path,
    cut: dict[str, int],
    earlier_cuts: Sequence[dict[str, int]] = (),
    id_policy: IdStorePolicy | None = None,
    lines: TextLines = WORDCOUNT_LINES,
) -> list[tuple[str, int, str]]:
    """(partition, offset, text) of every record before ``cut`` that processing must see, in arrival order;
    ``lines``: the source's declared format (which segments are id envelopes)."""
    ids = ReferenceIds(id_policy or IdStorePolicy())
    records = {p: partition_records(input_dir / p, end, lines) for p, end in cut.items()}
    kept: list[tuple[str, int, str]] = []
    start: dict[str, int] = {}
    longest = max_line_bytes()
    for batch_end in [*earlier_cuts, cut]:
        for p in sorted(records):
            first = start.get(p, 0)
            for offset, (jsonl, line) in enumerate(records[p][first : batch_end.get(p, 0)], first):
                if len(line) > longest:
                    continue
                if jsonl:
                    record = id_record(line)
                    if record is not None and ids.admit(record[0], record[1]):
                        kept.append((p, offset, record[2]))
                else:
                    try:
                        kept.append((p, offset, line.decode("utf-8")))
                    except UnicodeDecodeError:
                        pass
            start[p] = max(first, batch_end.get(p, 0))
        ids.end_batch()
    return kept


def recount(
    input_dir: Path,
    cut: dict[str, int],
    earlier_cuts: Sequence[dict[str, int]] = (),
    id_policy: IdStorePolicy | None = None,
    lines: TextLines = WORDCOUNT_LINES,
) -> Counter[str]:
    counts: Counter[str] = Counter()
    for _, _, text in kept_records(input_dir, cut, earlier_cuts, id_policy, lines):
        counts.update(tokenize(text))
    return counts
