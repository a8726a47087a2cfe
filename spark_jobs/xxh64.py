"""XXH64 of a string in plain Python: what Spark's ``xxhash64`` gives one string column (seed 42), computed in
the driver without a Spark job (``epoch_source.epoch_of_file`` hashes a catch-up's file names with it)."""

from __future__ import annotations

import struct

MASK = (1 << 64) - 1
P1, P2, P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
P4, P5 = 9650029242287828579, 2870177450012600261
SPARK_SEED = 42


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & MASK


def _round(acc: int, lane: int) -> int:
    return _rotl((acc + lane * P2) & MASK, 31) * P1 & MASK


def xxh64(data: bytes, seed: int = 0) -> int:
    """The XXH64 digest of ``data`` (unsigned)."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & MASK, (seed + P2) & MASK, seed & MASK, (seed - P1) & MASK]
        while i + 32 <= n:
            lanes = struct.unpack_from("<4Q", data, i)
            v = [_round(acc, lane) for acc, lane in zip(v, lanes, strict=True)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & MASK
        for acc in v:
            h = ((h ^ _round(0, acc)) * P1 + P4) & MASK
    else:
        h = (seed + P5) & MASK
    h = (h + n) & MASK
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, struct.unpack_from("<Q", data, i)[0]), 27) * P1 + P4) & MASK
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ (struct.unpack_from("<I", data, i)[0] * P1 & MASK), 23) * P2 + P3) & MASK
        i += 4
    while i < n:
        h = _rotl(h ^ (data[i] * P5 & MASK), 11) * P1 & MASK
        i += 1
    h = (h ^ (h >> 33)) * P2 & MASK
    h = (h ^ (h >> 29)) * P3 & MASK
    return h ^ (h >> 32)


def spark_xxhash64(value: str) -> int:
    """Spark's ``xxhash64`` of one string column: XXH64 of its UTF-8 bytes with seed 42, as a signed long."""
    h = xxh64(value.encode(), SPARK_SEED)
    return h - (1 << 64) if h >= 1 << 63 else h
