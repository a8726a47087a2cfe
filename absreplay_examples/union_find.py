"""Connected components by union-find in plain Python: the reference connected_components is checked against.

Independent of the job: it reads the segment files on disk (not the catalog),
takes the first ``cut[partition]`` records of each partition in segment name
order, parses ``src dst`` lines itself, and skips the lines that are not edges
or are longer than the maximum line length (the job turns them into dead letters). A vertex's component is the smallest
vertex id in it, the label connected_components converges to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from absreplay_examples.recount import complete_segments
from coordinator.sources.segment_reader import max_line_bytes

EDGE = re.compile(rb"[ \t\r\f\v]*([+-]?[0-9]+)[ \t\r\f\v]+([+-]?[0-9]+)[ \t\r\f\v]*")
LONG = range(-(2**63), 2**63)


class UnionFind:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def add(self, v: int) -> None:
        self.parent.setdefault(v, v)

    def find(self, v: int) -> int:
        root = v
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[v] != root:  # path compression
            self.parent[v], v = root, self.parent[v]
        return root

    def union(self, a: int, b: int) -> None:
        self.add(a)
        self.add(b)
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # the smaller id is the root, so a root is its component's label
            self.parent[max(ra, rb)] = min(ra, rb)

    def labels(self) -> dict[int, int]:
        return {v: self.find(v) for v in self.parent}


def components(edges: Iterable[tuple[int, int]]) -> dict[int, int]:
    uf = UnionFind()
    for a, b in edges:
        uf.union(a, b)
    return uf.labels()


def read_edges(input_dir: Path, cut: dict[str, int]) -> list[tuple[int, int]]:
    """The edges among the first ``cut[partition]`` records of every partition."""
    edges = []
    longest = max_line_bytes()
    for partition, end in sorted(cut.items()):
        seen = 0
        for seg in complete_segments(input_dir / partition):
            if seen >= end:
                break
            raw = seg.read_bytes().split(b"\n")
            if raw and raw[-1] == b"":
                raw.pop()
            for line in raw[: end - seen]:
                if len(line) > longest:
                    continue  # a dead letter, like any line that is not an edge
                m = EDGE.fullmatch(line)
                if m and int(m.group(1)) in LONG and int(m.group(2)) in LONG:
                    edges.append((int(m.group(1)), int(m.group(2))))
            seen += len(raw)
    return edges


def labels_at(input_dir: Path, cut: dict[str, int]) -> dict[int, int]:
    """vertex -> component of the graph of every edge before ``cut``."""
    return components(read_edges(input_dir, cut))
