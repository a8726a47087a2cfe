"""An event-time window's Bloom filter, in front of its exact ids (``id_store``), and the bytes it is kept
as (``id_filters.bits``).

The filter is rbloom's (Rust): sized for ``expected_items`` at ``false_positive_rate`` (m = -n ln p /
ln(2)^2 bits), one stable hash per item, the UTF-8 bytes' XXH3-128 as the signed 128-bit int rbloom
takes. Never Python's ``hash``: it is salted per process, and a filter outlives the process.

Kept as: a zero byte, the format version (1), the capacity (8 bytes, little-endian), then rbloom's
``save_bytes``. A filter of the earlier, hand-written format starts with its number of hashes (1 to
255) instead of the zero byte: ``is_legacy`` says so, and the store rebuilds it from the window's
exact ids (``record_ids``, the truth either way).
"""

from __future__ import annotations

import struct

import xxhash
from rbloom import Bloom

MARKER = 0
VERSION = 1
HEADER = struct.Struct("<BBQ")  # marker, version, capacity


def stable_hash(item: str) -> int:
    """XXH3-128 of the item's UTF-8 bytes, as a signed 128-bit int (rbloom's range): the same in every process."""
    return xxhash.xxh3_128_intdigest(item.encode("utf-8")) - (1 << 127)


def is_legacy(data: bytes) -> bool:
    """A filter of the hand-written format (first byte: its number of hashes, never 0)."""
    return bool(data) and data[0] != MARKER


class WindowFilter:
    """A Bloom filter with the capacity it was sized for (how many items it holds at its design rate)."""

    __slots__ = ("bloom", "capacity")

    def __init__(self, bloom: Bloom, capacity: int) -> None:
        self.bloom = bloom
        self.capacity = capacity

    @classmethod
    def sized(cls, expected_items: int, false_positive_rate: float) -> WindowFilter:
        """The smallest filter whose false-positive rate stays at ``false_positive_rate`` for that many items."""
        capacity = max(1, expected_items)
        return cls(Bloom(capacity, false_positive_rate, stable_hash), capacity)

    @classmethod
    def from_bytes(cls, data: bytes) -> WindowFilter:
        """ValueError for bytes of another format (``is_legacy``: the hand-written one) or version."""
        if len(data) < HEADER.size:
            raise ValueError(f"an id filter of {len(data)} bytes is shorter than its header")
        marker, version, capacity = HEADER.unpack_from(data)
        if marker != MARKER or version != VERSION:
            raise ValueError(f"an id filter of format {marker}/{version}, not {MARKER}/{VERSION}")
        return cls(Bloom.load_bytes(data[HEADER.size:], stable_hash), capacity)

    def to_bytes(self) -> bytes:
        return HEADER.pack(MARKER, VERSION, self.capacity) + self.bloom.save_bytes()

    def add(self, item: str) -> None:
        self.bloom.add(item)

    def __contains__(self, item: str) -> bool:
        return item in self.bloom
