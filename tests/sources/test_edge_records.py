"""Edge lines for connected_components: what is an edge, dead letters at inject, the union-find reference."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import select

from absreplay_examples.sample_edges import edge_lines, land_edges
from absreplay_examples.union_find import components, labels_at, read_edges
from coordinator.catalog.models import DeadLetter
from absreplay_examples.definitions import connected_components
from absreplay_examples.connected_components import edge_problem, parse_edge
from coordinator.sources.record_formats import TextLines
from coordinator.sources.source import scan_segment
from tests.helpers import make_workspace


@pytest.mark.parametrize(
    ("line", "edge"),
    [
        (b"1 2", (1, 2)),
        (b"  7\t\t-3 \r", (7, -3)),
        (b"+5 005", (5, 5)),
        (b"9223372036854775807 -9223372036854775808", (2**63 - 1, -(2**63))),
        (b"1 2 3", None),
        (b"1", None),
        (b"", None),
        (b"a b", None),
        (b"1.5 2", None),
        (b"# comment", None),
        ("1\u00a02".encode(), None),  # a no-break space is not a separator
        ("\u0661 2".encode(), None),  # an Arabic-Indic digit is not an id
        (b"9223372036854775808 1", None),
    ],
)
def test_what_an_edge_line_is(line: bytes, edge: tuple[int, int] | None) -> None:
    assert parse_edge(line) == edge
    assert (edge_problem(line) is None) == (edge is not None)


def test_scan_marks_lines_that_are_not_edges_as_bad_records(tmp_path) -> None:
    seg = tmp_path / "seg-1.txt"
    seg.write_bytes(b"1 2\nnot an edge\n3 4\n\xff\xfe 5\n99999999999999999999 1\n")
    scanned = scan_segment("p0", seg, TextLines(check=edge_problem))
    assert scanned.records == 5
    assert [(b.offset_in_segment, b.reason.split(":")[0]) for b in scanned.bad_records] == [
        (1, "not an edge"), (3, "not valid UTF-8 at byte 0 of the line"), (4, "not an edge"),
    ]
    assert "64-bit" in scanned.bad_records[2].reason
    assert scan_segment("p0", seg).bad_records[0].offset_in_segment == 3  # text jobs take any UTF-8 line


def test_inject_turns_malformed_edge_lines_into_dead_letters(tmp_path, sqlite_url) -> None:
    ws = make_workspace(tmp_path, sqlite_url, connected_components())
    (ws.input_dir / "p0").mkdir(parents=True)
    (ws.input_dir / "p0" / "seg-000001.txt").write_text("1 2\n2 3 4\nx y\n3 1\n")
    outcome = ws.coordinator.inject()
    assert outcome.cut == {"p0": 4}
    with ws.store.sessions() as s:
        dead = s.execute(select(DeadLetter.offset, DeadLetter.payload).order_by(DeadLetter.offset)).all()
    assert dead == [(1, "2 3 4"), (2, "x y")]
    assert labels_at(ws.input_dir, outcome.cut) == {1: 1, 2: 1, 3: 1}


def test_union_find_labels_every_vertex_with_the_smallest_id_of_its_component() -> None:
    assert components([(5, 3), (3, 9), (7, 7), (10, 11), (11, 4)]) == {
        5: 3, 3: 3, 9: 3, 7: 7, 10: 4, 11: 4, 4: 4,
    }
    rng = random.Random(3)
    edges = [(rng.randrange(200), rng.randrange(200)) for _ in range(150)]
    labels = components(edges)
    # brute force: grow each component from its smallest vertex
    adjacency: dict[int, set[int]] = {}
    for a, b in edges:
        adjacency.setdefault(a, set()).add(b)
        adjacency.setdefault(b, set()).add(a)
    for v in sorted(adjacency):
        seen, todo = {v}, [v]
        while todo:
            for w in adjacency[todo.pop()] - seen:
                seen.add(w)
                todo.append(w)
        assert labels[v] == min(seen)


def test_sample_edges_are_deterministic_edge_lines_and_read_back_by_cut(tmp_path) -> None:
    lines = edge_lines(random.Random(1), 50, 100)
    assert lines == edge_lines(random.Random(1), 50, 100)
    assert all(parse_edge(line.encode()) for line in lines)
    assert land_edges(tmp_path, 0, 30, 50) == 60
    land_edges(tmp_path, 1, 30, 50)
    assert len(read_edges(tmp_path, {"p0": 40, "p1": 30})) == 70
    assert read_edges(tmp_path, {"p0": 30})[:2] == [tuple(map(int, line.split())) for line in
                                                   (tmp_path / "p0" / "seg-000000.txt").read_text().splitlines()[:2]]
