"""Id envelopes (`.jsonl` segments of a text source that declares them): records with explicit ids; what
counts as a record and what is a dead letter.

The source (coordinator.sources.source) and the independent recount (absreplay_examples.recount)
implement the rules separately; every case here is checked against both.
"""

from __future__ import annotations

import pytest

from absreplay_examples.recount import id_record
from absreplay_examples.connected_components import edge_problem
from coordinator.sources.record_formats import TextLines
from coordinator.sources.source import BadIdRecordError, parse_id_record, scan_segment

ENVELOPES = TextLines(id_envelope=".jsonl")

VALID = [
    (b'{"id": "a-1", "ts": 10, "line": "Hello world"}', ("a-1", 10, "Hello world")),
    (b'{"line": "", "ts": 0, "id": 42, "extra": {"nested": [1, 2.5, null]}}', ("42", 0, "")),
    ('{"id": "caf\u00e9", "ts": 9007199254740991, "line": "na\u00efve \\u00e9"}'.encode(),
     ("caf\u00e9", 2**53 - 1, "na\u00efve \u00e9")),
    (b'  {"id": "x", "ts": 1, "line": "trailing cr"}\r', ("x", 1, "trailing cr")),
]

INVALID = [
    (b"not json", "not a JSON object: Expecting value"),
    (b"", "not a JSON object: Expecting value"),
    (b'["id", "ts"]', "not a JSON object: the line is a JSON array"),
    (b'{"id": "a", "ts": 1, "line": "x"} trailing', "not a JSON object: Extra data"),
    (b'{"ts": 1, "line": "x"}', "'id' must be a string or an integer, got nothing (missing)"),
    (b'{"id": null, "ts": 1, "line": "x"}', "'id' must be a string or an integer, got null"),
    (b'{"id": true, "ts": 1, "line": "x"}', "'id' must be a string or an integer, got boolean"),
    (b'{"id": 1.5, "ts": 1, "line": "x"}', "'id' must be a string or an integer, got number"),
    (b'{"id": "", "ts": 1, "line": "x"}', "'id' must be 1 to 255 characters long, got 0"),
    (b'{"id": "' + b"x" * 256 + b'", "ts": 1, "line": "x"}', "'id' must be 1 to 255 characters long, got 256"),
    (b'{"id": "a\\u0000b", "ts": 1, "line": "x"}', "'id' contains a NUL character"),
    (b'{"id": "\\ud800", "ts": 1, "line": "x"}', "'id' holds an unpaired surrogate"),
    (b'{"id": "a", "line": "x"}', "'ts' must be an integer (event time in seconds), got nothing (missing)"),
    (b'{"id": "a", "ts": "10", "line": "x"}', "'ts' must be an integer (event time in seconds), got string"),
    (b'{"id": "a", "ts": 10.0, "line": "x"}', "'ts' must be an integer (event time in seconds), got number"),
    (b'{"id": "a", "ts": -1, "line": "x"}', "'ts' must be between 0 and 2**53 - 1, got -1"),
    (b'{"id": "a", "ts": 9007199254740992, "line": "x"}', "'ts' must be between 0 and 2**53 - 1"),
    (b'{"id": "a", "ts": 1}', "'line' must be a string, got nothing (missing)"),
    (b'{"id": "a", "ts": 1, "line": 7}', "'line' must be a string, got integer"),
    (b'{"id": "a", "ts": 1, "line": "\\udfff"}', "'line' holds an unpaired surrogate"),
    (b'{"id": "a", "ts": 1, "line": "x", "line": "y"}', "duplicate key 'line' in the JSON object"),
    (b'{"id": "a", "ts": NaN, "line": "x"}', "not a JSON object: NaN is not valid JSON"),
    (b'{"id": "a", "ts": 1, "line": "\xff"}', "not valid UTF-8 at byte 30 of the line"),
    (b"[" * 100_000, "not a JSON object"),
]


@pytest.mark.parametrize("line, expected", VALID)
def test_valid_records(line: bytes, expected: tuple[str, int, str]) -> None:
    assert parse_id_record(line) == expected
    assert id_record(line) == expected


@pytest.mark.parametrize("line, reason", INVALID, ids=[r[:40] for _, r in INVALID])
def test_invalid_records_say_why(line: bytes, reason: str) -> None:
    with pytest.raises(BadIdRecordError) as info:
        parse_id_record(line)
    message = str(info.value)
    assert message.startswith(reason) and "\n" not in message
    assert id_record(line) is None  # the recount skips exactly what the source dead-letters


def test_scanning_a_jsonl_segment_returns_ids_and_bad_records(tmp_path) -> None:
    seg = tmp_path / "seg-000001.jsonl"
    seg.write_bytes(
        b'{"id": "a", "ts": 5, "line": "one"}\n'
        b"oops\n"
        b'{"id": 7, "ts": 6, "line": "two"}\n'
        b'{"id": "a", "ts": 5, "line": "one"}\n'
    )
    scanned = scan_segment("p0", seg, ENVELOPES)
    assert scanned.records == 4
    assert [(r.offset_in_segment, r.record_id, r.ts) for r in scanned.id_records] == [(0, "a", 5), (2, "7", 6), (3, "a", 5)]
    assert [(b.offset_in_segment, b.payload) for b in scanned.bad_records] == [(1, b"oops")]
    assert scanned.bad_records[0].reason.startswith("not a JSON object")


def test_text_segments_are_unchanged(tmp_path) -> None:
    seg = tmp_path / "seg-000001.txt"
    seg.write_bytes(b'{"id": "a", "ts": 5, "line": "one"}\nplain\n')
    scanned = scan_segment("p0", seg, ENVELOPES)
    assert (scanned.records, scanned.bad_records, scanned.id_records) == (2, [], [])


def test_the_line_of_an_id_record_must_fit_the_jobs_record_format(tmp_path) -> None:
    seg = tmp_path / "seg-000001.jsonl"
    seg.write_bytes(b'{"id": "e1", "ts": 1, "line": "1 2"}\n{"id": "e2", "ts": 1, "line": "one two"}\n')
    scanned = scan_segment("p0", seg, TextLines(check=edge_problem, id_envelope=".jsonl"))
    assert [r.record_id for r in scanned.id_records] == ["e1"]
    assert [b.offset_in_segment for b in scanned.bad_records] == [1]
    assert scanned.bad_records[0].reason.startswith("'line' is not an edge")
