"""XXH64 of a string (the ``xxhash`` package): what Spark's ``xxhash64`` gives one string column (seed 42),
computed in the driver without a Spark job (``epoch_source.epoch_of_file`` hashes a catch-up's file names
with it)."""

from __future__ import annotations

import xxhash

SPARK_SEED = 42


def xxh64(data: bytes, seed: int = 0) -> int:
    """The XXH64 digest of ``data`` (unsigned)."""
    return xxhash.xxh64_intdigest(data, seed)


def spark_xxhash64(value: str) -> int:
    """Spark's ``xxhash64`` of one string column: XXH64 of its UTF-8 bytes with seed 42, as a signed long."""
    h = xxh64(value.encode(), SPARK_SEED)
    return h - (1 << 64) if h >= 1 << 63 else h
