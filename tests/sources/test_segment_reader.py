"""Segments are read as streams: the same records as splitting the whole file, bounded memory, a
maximum line length (longer lines are dead letters, skipped by processing, counted by nobody)."""

from __future__ import annotations

import hashlib
import tracemalloc
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import select

from absreplay_examples.recount import tokenize
from coordinator.catalog.models import DeadLetter, SourceSegment
from coordinator.errors import ConfigError
from absreplay_examples.definitions import connected_components
from absreplay_examples.connected_components import edge_problem
from coordinator.sources.record_formats import TextLines
from coordinator.sources.segment_reader import (
    MAX_LINE_BYTES,
    PAYLOAD_PREVIEW,
    LongLine,
    SegmentReader,
    checksum_of,
    max_line_bytes,
)
from coordinator.sources.source import scan_segment, split_records
from tests.helpers import make_workspace

MiB = 1 << 20


@given(
    data=st.binary(max_size=300).map(lambda b: b.replace(b"\x00", b"\n")),
    chunk=st.integers(1, 64),
    limit=st.integers(1, 400),
)
def test_a_stream_splits_into_the_records_of_the_whole_file(tmp_path_factory, data, chunk, limit) -> None:
    path = tmp_path_factory.mktemp("seg") / "s"
    path.write_bytes(data)
    reader = SegmentReader(path, max_line=limit, chunk_bytes=chunk)
    expected = [line if len(line) <= limit else LongLine(len(line), line[:PAYLOAD_PREVIEW])
                for line in split_records(data)]
    assert list(reader.lines()) == expected
    assert (reader.bytes, reader.checksum) == (len(data), hashlib.sha256(data).hexdigest())
    assert reader.mtime_ns == path.stat().st_mtime_ns


def test_the_maximum_line_length_is_one_mib_unless_the_environment_says_otherwise() -> None:
    assert max_line_bytes({}) == MAX_LINE_BYTES == MiB
    assert max_line_bytes({"ABS_MAX_LINE_BYTES": "4096"}) == 4096
    for bad in ("0", "-1", "1k", "lots"):
        with pytest.raises(ConfigError, match="ABS_MAX_LINE_BYTES"):
            max_line_bytes({"ABS_MAX_LINE_BYTES": bad})


def test_a_long_line_is_one_bad_record_with_its_length_and_a_preview(tmp_path) -> None:
    seg = tmp_path / "seg-1.txt"
    seg.write_bytes(b"first line\n" + b"x" * (2 * MiB) + b"\nlast line\n")
    scanned = scan_segment("p0", seg)
    assert scanned.records == 3
    [bad] = scanned.bad_records
    assert bad.offset_in_segment == 1
    assert bad.reason == "line of 2,097,152 bytes is longer than the maximum of 1,048,576 bytes (ABS_MAX_LINE_BYTES)"
    assert bad.payload == b"x" * PAYLOAD_PREVIEW
    assert (scanned.bytes, scanned.checksum) == (seg.stat().st_size, checksum_of(seg))


@pytest.mark.parametrize("name", ["seg-1.txt", "seg-1.jsonl"])
def test_a_long_line_is_a_dead_letter_for_every_record_format(tmp_path, name) -> None:
    seg = tmp_path / name
    seg.write_bytes(b'{"id": "a", "ts": 1, "line": "1 2"}\n' + b"7 " * 100 + b"\n")
    envelopes = TextLines(id_envelope=".jsonl"), TextLines(check=edge_problem, id_envelope=".jsonl")
    for fmt in (TextLines(), TextLines(check=edge_problem), *envelopes):
        scanned = scan_segment("p0", seg, fmt, max_line=150)
        assert [(b.offset_in_segment, b.reason.split(" is ")[0]) for b in scanned.bad_records][-1] == (
            1, "line of 200 bytes")


def test_scanning_holds_a_chunk_and_a_line_in_memory_not_the_segment(tmp_path) -> None:
    """A 40 MiB segment (a 24 MiB line among short ones) is scanned with a small fraction of its size
    in memory: it is streamed, and a line past the maximum keeps only its preview."""
    seg = tmp_path / "seg-1.txt"
    with seg.open("wb") as f:
        for _ in range(8):
            f.write(b"some words on a line\n" * 100_000)  # 2 MiB
        f.write(b"y" * (24 * MiB) + b"\n")
    size = seg.stat().st_size
    tracemalloc.start()
    try:
        scanned = scan_segment("p0", seg)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size > 40 * MiB and peak < 8 * MiB, f"peak {peak:,} bytes for a segment of {size:,}"
    assert scanned.records == 800_001 and [b.offset_in_segment for b in scanned.bad_records] == [800_000]


def test_inject_records_size_checksum_and_mtime_and_dead_letters_a_long_line(tmp_path, sqlite_url) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    part = ws.input_dir / "p0"
    part.mkdir(parents=True)
    seg = part / "seg-1.txt"
    seg.write_bytes(b"a b\n" + b"z" * (MiB + 1) + b"\nc\n")
    assert ws.coordinator.inject().cut == {"p0": 3}
    with ws.store.sessions() as s:
        row = s.scalars(select(SourceSegment)).one()
        dead = s.execute(select(DeadLetter.offset, DeadLetter.reason)).all()
    assert (row.bytes, row.checksum, row.mtime_ns) == (seg.stat().st_size, checksum_of(seg), seg.stat().st_mtime_ns)
    assert dead == [(1, "line of 1,048,577 bytes is longer than the maximum of 1,048,576 bytes (ABS_MAX_LINE_BYTES)")]


def test_processing_skips_a_2_mb_line_and_counts_every_other_line_once(tmp_path, sqlite_url, spark) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    short = ["alpha beta", "beta gamma gamma", "delta"]
    part = ws.input_dir / "p0"
    part.mkdir(parents=True)
    (part / "seg-000001.txt").write_bytes(
        f"{short[0]}\n".encode() + b"huge " * 400_000 + f"\n{short[1]}\n{short[2]}".encode()  # no final newline
    )
    (ws.input_dir / "p1").mkdir()
    (ws.input_dir / "p1" / "seg-000001.txt").write_text("alpha\n")
    ws.coordinator.inject()
    ws.run_epochs(spark)
    ws.coordinator.finalize()
    assert ws.committed() == Counter(w for line in [*short, "alpha"] for w in tokenize(line))
    assert ws.committed() == ws.expected_at(1)  # the independent recount skips the long line too


def test_the_edge_reader_skips_a_long_line_by_its_dead_letter_offset(tmp_path, sqlite_url, spark) -> None:
    from spark_jobs.records.epoch_source import read_epoch
    from spark_jobs.run.runner import EpochRunner

    ws = make_workspace(tmp_path, sqlite_url, connected_components())
    part = ws.input_dir / "p0"
    part.mkdir(parents=True)
    (part / "seg-000001.txt").write_bytes(b"1 2\n" + b" " * (2 * MiB) + b"3 4\n5 6\n")  # a valid edge, too long
    ws.coordinator.inject()
    runner = EpochRunner(spark, ws.store, ws.job, ws.settings.data_dir, ws.settings.state_uri)
    [plan] = runner.read_plan().epochs
    assert plan.dead_offsets == [("p0", 1)]
    rows = read_epoch(spark, ws.input_dir, plan.segments, ws.job.lines, plan.dead_offsets).orderBy("seq").collect()
    assert [(r.partition, r.seq, r.line) for r in rows] == [("p0", 0, "1 2"), ("p0", 2, "5 6")]
