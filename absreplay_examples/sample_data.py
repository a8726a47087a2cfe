"""Sample text for the demo, the tests and the benchmarks, landed as segment files.

Deterministic for a seed. Words follow a skewed (Zipf-like) distribution over
a vocabulary that includes mixed case, accents and punctuation, so tokenizing
is exercised. A segment is written under a temporary name and renamed, as a
real producer must do.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from coordinator.storage.location import Location, write_whole

PUNCTUATION = [" ", " ", " ", " ", ", ", ". ", "; ", " - ", "! ", "? ", " (", ") ", "'s "]
ACCENTED = ["café", "naïve", "Straße", "Ærø", "São", "über", "Ελλάδα", "crème_brûlée", "niño"]


def vocabulary(size: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    words = []
    for i in range(size):
        base = f"w{i}"
        if i % 97 == 0:
            base = ACCENTED[(i // 97) % len(ACCENTED)] + str(i)
        if rng.random() < 0.1:
            base = base.capitalize() if rng.random() < 0.5 else base.upper()
        words.append(base)
    return words


def lines(rng: random.Random, vocab: list[str], count: int, words_per_line: int = 8) -> list[str]:
    n = len(vocab)
    out = []
    for _ in range(count):
        k = rng.randint(0, 2 * words_per_line)
        if k == 0:
            out.append("")
            continue
        # skewed: low indices are frequent, the tail is still reached
        idx = [min(int(n * rng.random() ** 2), n - 1) for _ in range(k)]
        parts = []
        for j in idx:
            parts.append(vocab[j])
            parts.append(rng.choice(PUNCTUATION))
        out.append("".join(parts).strip())
    return out


def land_segment(partition_dir: Path | Location, name: str, text_lines: list[str]) -> Path | Location:
    """Write a segment whole under its final name (``coordinator.storage.location.write_whole``)."""
    final = partition_dir / name
    write_whole(final, ("\n".join(text_lines) + ("\n" if text_lines else "")).encode("utf-8"))
    return final


def land_jsonl_segment(partition_dir: Path, name: str, records: list[dict]) -> Path:
    """A segment of records with explicit ids (``name`` ends in ``.jsonl``): one JSON object per line."""
    return land_segment(partition_dir, name, [json.dumps(r, ensure_ascii=False) for r in records])


def land_batch(
    input_dir: Path,
    batch: int,
    lines_per_partition: int,
    partitions: int = 2,
    vocab_size: int = 5000,
    seed: int = 42,
    words_per_line: int = 8,
) -> int:
    """Land one segment per partition for ``batch``; returns the number of lines landed."""
    vocab = vocabulary(vocab_size)
    total = 0
    for p in range(partitions):
        rng = random.Random(f"{seed}-{batch}-{p}")
        text = lines(rng, vocab, lines_per_partition, words_per_line)
        land_segment(input_dir / f"p{p}", f"seg-{batch:06d}.txt", text)
        total += len(text)
    return total
