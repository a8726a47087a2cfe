"""The segment-file source: which files count, offsets, dead letters for bad UTF-8."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from coordinator.errors import SourceError
from coordinator.sources.source import list_partitions, list_segments, scan_segment, split_records
from tests.helpers import make_workspace


def test_incomplete_segments_are_ignored(tmp_path) -> None:
    p = tmp_path / "p0"
    p.mkdir()
    for name in ("seg-2.txt", "seg-1.txt", ".seg-3.txt", "_seg-4.txt", "seg-5.txt.tmp", "seg-6.txt._COPYING_"):
        (p / name).write_text("a\n")
    assert list_segments(p) == ["seg-1.txt", "seg-2.txt"]


def test_partition_that_is_a_file_is_an_error(tmp_path) -> None:
    (tmp_path / "p0").mkdir()
    (tmp_path / "p1").write_text("oops")
    with pytest.raises(SourceError, match="partition .*p1 is a file"):
        list_partitions(tmp_path)


def test_records_are_lines_and_a_final_newline_adds_none() -> None:
    assert split_records(b"") == []
    assert split_records(b"a\nb\n") == [b"a", b"b"]
    assert split_records(b"a\n\nb") == [b"a", b"", b"b"]


def test_invalid_utf8_lines_become_bad_records(tmp_path) -> None:
    seg = tmp_path / "s"
    seg.write_bytes(b"good line\n\xff\xfe bad\nalso good\n")
    scanned = scan_segment("p0", seg)
    assert scanned.records == 3
    assert [b.offset_in_segment for b in scanned.bad_records] == [1]
    assert "not valid UTF-8" in scanned.bad_records[0].reason


def test_inject_assigns_offsets_in_arrival_order_and_dead_letters(tmp_path, sqlite_url) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    part = ws.input_dir / "p0"
    part.mkdir(parents=True)
    (part / "seg-000001.txt").write_text("a b\nc\n")
    assert ws.coordinator.inject().cut == {"p0": 2}
    (part / "seg-000002.txt").write_bytes(b"d\n\xc3\x28\ne\n")
    outcome = ws.coordinator.inject()
    assert outcome.cut == {"p0": 5} and outcome.new_records == 3
    with ws.store.engine.connect() as c:
        dead = c.execute(text('SELECT checkpoint_id, partition, "offset" FROM dead_letters')).all()
        stats = c.execute(text("SELECT checkpoint_id, dead_letters FROM checkpoint_stats ORDER BY 1")).all()
    assert dead == [(2, "p0", 3)]
    assert stats == [(1, 0), (2, 1)]
