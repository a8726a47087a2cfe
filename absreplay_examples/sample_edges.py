"""Sample edge lists for connected_components (tests, benchmark, README), landed as segment files.

Deterministic for a seed. Edges join uniformly random vertices of
``0..vertices-1``: a sparse random graph has many small components and, above
one edge per two vertices, a giant one whose diameter exceeds a few rounds, so
back-edge logs are not empty. Separators mix spaces and tabs; a few edges are
repeated or self-loops, which the job must tolerate.

    python -m absreplay_examples.sample_edges --batch 0 --edges 5000 --vertices 10000

lands batch 0 under ``$ABS_DATA_DIR/connected_components/input/p<i>/``.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from absreplay_examples.sample_data import land_segment

JOB = "connected_components"


def edge_lines(rng: random.Random, vertices: int, count: int) -> list[str]:
    out = []
    for _ in range(count):
        u = rng.randrange(vertices)
        v = u if rng.random() < 0.01 else rng.randrange(vertices)
        out.append(f"{u}{rng.choice([' ', ' ', '  ', chr(9)])}{v}")
    return out


def land_edges(input_dir: Path, batch: int, edges_per_partition: int, vertices: int, partitions: int = 2,
               seed: int = 42) -> int:
    """Land one segment of random edges per partition for ``batch``; returns the number of edges landed."""
    total = 0
    for p in range(partitions):
        rng = random.Random(f"edges-{seed}-{batch}-{p}")
        lines = edge_lines(rng, vertices, edges_per_partition)
        land_segment(input_dir / f"p{p}", f"seg-{batch:06d}.txt", lines)
        total += len(lines)
    return total


def main(argv: list[str] | None = None) -> None:
    from coordinator.settings import Settings
    from coordinator.sources import source

    parser = argparse.ArgumentParser(prog="python -m absreplay_examples.sample_edges", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, required=True, help="batch number (the segment name)")
    parser.add_argument("--edges", type=int, default=5000, help="edges per partition")
    parser.add_argument("--vertices", type=int, default=10000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    input_dir = source.input_dir(Settings.from_env().data_dir, JOB)
    n = land_edges(input_dir, args.batch, args.edges, args.vertices, args.partitions, args.seed)
    print(f"landed {n:,} edges of batch {args.batch} under {input_dir}")


if __name__ == "__main__":
    main()
