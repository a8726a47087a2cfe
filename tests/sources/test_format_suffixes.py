"""How a segment is parsed comes from its source's declared format alone: a file's name never changes
it. Only a text source that declares an id envelope (``TextLines(id_envelope=...)``) reads one, and only
in the segments whose name ends in its suffix; a JSON-lines or CSV source named ``*.jsonl`` is still
JSON lines or CSV."""

from __future__ import annotations

import json

import pytest

from absreplay_examples.definitions import wordcount
from absreplay_examples.recount import WORDCOUNT_LINES, kept_records
from coordinator.sources.record_formats import Csv, JsonLines, TextLines
from coordinator.sources.source import scan_segment

SUFFIXES = [".jsonl", ".ndjson", ".json", ".csv", ".txt", ""]
CLICKS = (("id", "string"), ("ts", "long"), ("user", "string"))
ENVELOPES = [json.dumps({"id": f"e{i}", "ts": 5 + i, "line": f"word{i} other"}) for i in range(3)]
CLICK_LINES = [json.dumps({"id": f"c{i}", "ts": 7_000 + i, "user": f"u{i}"}) for i in range(3)]

#: (declared format, its valid records, the suffix whose segments hold envelopes, (id, ts) read per record)
CASES = {
    "text": (TextLines(), [*ENVELOPES, "plain words"], None, []),
    "text with .jsonl envelopes": (TextLines(id_envelope=".jsonl"), ENVELOPES, ".jsonl",
                                   [("e0", 5), ("e1", 6), ("e2", 7)]),
    "text with .ndjson envelopes": (TextLines(id_envelope=".ndjson"), ENVELOPES, ".ndjson",
                                    [("e0", 5), ("e1", 6), ("e2", 7)]),
    "json lines with an id field": (JsonLines(CLICKS, time_field="ts", id_field="id"), CLICK_LINES, None,
                                    [("c0", 7), ("c1", 7), ("c2", 7)]),
    "json lines": (JsonLines(CLICKS, time_field="ts"), CLICK_LINES, None, []),
    "csv": (Csv(CLICKS, time_field="ts"), ["c0,7000,u0", "c1,7001,u1"], None, []),
}


@pytest.mark.parametrize("suffix", SUFFIXES, ids=lambda s: s or "no suffix")
@pytest.mark.parametrize("case", CASES)
def test_valid_records_stay_records_whatever_the_file_is_named(tmp_path, case, suffix) -> None:
    fmt, lines, envelope, ids = CASES[case]
    seg = tmp_path / f"seg-000001{suffix}"
    seg.write_text("".join(f"{line}\n" for line in lines))
    scanned = scan_segment("p0", seg, fmt)
    assert (scanned.records, scanned.bad_records) == (len(lines), [])
    read_ids = [(r.record_id, r.ts) for r in scanned.id_records]
    if isinstance(fmt, TextLines):  # a text source reads ids only from the envelopes it declares
        ids = ids if suffix == envelope else []
    assert read_ids == ids


@pytest.mark.parametrize("suffix", SUFFIXES, ids=lambda s: s or "no suffix")
def test_a_text_source_without_envelope_takes_an_envelope_line_as_text(tmp_path, suffix) -> None:
    seg = tmp_path / "p0" / f"seg-000001{suffix}"
    seg.parent.mkdir()
    seg.write_text(f"{ENVELOPES[0]}\n")
    assert [text for _, _, text in kept_records(tmp_path, {"p0": 1}, lines=TextLines())] == [ENVELOPES[0]]
    expected = "word0 other" if suffix == ".jsonl" else ENVELOPES[0]
    assert [text for _, _, text in kept_records(tmp_path, {"p0": 1})] == [expected]  # the wordcount job's


def test_the_wordcount_job_declares_jsonl_envelopes_as_its_recount_reads_them() -> None:
    assert wordcount().lines == WORDCOUNT_LINES == TextLines(id_envelope=".jsonl")


def test_an_empty_envelope_suffix_is_refused() -> None:
    with pytest.raises(ValueError, match="id_envelope"):
        TextLines(id_envelope="")
