"""Reading one segment file as a stream: its lines, its size, its content checksum, its mtime.

A segment is read in chunks of ``CHUNK_BYTES``, never whole, so scanning it
holds at most one chunk and one line (at most ``max_line_bytes()``) in memory,
whatever the file's size. Its records are its lines, split at ``\\n`` exactly as
``coordinator.sources.source.split_records`` splits bytes: a final newline does not
start another record.

A line longer than the maximum (``MAX_LINE_BYTES``, 1 MiB; the environment
variable ``ABS_MAX_LINE_BYTES`` overrides it) is still one record with one
offset, but only its length and first ``PAYLOAD_PREVIEW`` bytes are kept
(``LongLine``): the scan makes it a dead letter, so processing skips it.

The checksum is the sha256 of every byte read, so ``bytes``, ``checksum`` and
the records describe exactly the same content; ``mtime_ns`` is the file's
modification time when it was opened. The content tag (``content_tag``) is the
XXH64 of the same bytes, computed in the same pass: what a run checks the file
against before Spark reads it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import xxhash

from coordinator.errors import ConfigError, SourceError
from coordinator.storage.location import Location, read_version

#: a chunk split into lines holds several times its size in line objects: keep it small
CHUNK_BYTES = 256 << 10
MAX_LINE_BYTES = 1 << 20
MAX_LINE_ENV = "ABS_MAX_LINE_BYTES"
#: how much of a record a dead letter keeps (its payload)
PAYLOAD_PREVIEW = 200


def max_line_bytes(env: Mapping[str, str] | None = None) -> int:
    """The longest line that is a record; longer ones are dead letters (``ABS_MAX_LINE_BYTES``)."""
    raw = (os.environ if env is None else env).get(MAX_LINE_ENV, "").strip()
    if not raw:
        return MAX_LINE_BYTES
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{MAX_LINE_ENV}={raw!r} is malformed: expected a positive number of bytes")
    return int(raw)


def new_checksum() -> hashlib._Hash:
    """The segment content checksum (``source_segments.checksum``): sha256, hex digest."""
    return hashlib.sha256()


#: the kind of content tag a segment file gets (``source_segments.content_tag`` is ``<kind>:<value>``)
TAG_KIND = "xxh64"


def new_tag_digest() -> xxhash.xxh64:
    """The digest of a segment file's content tag: XXH64 (seed 0, as ``xxh64sum`` prints it), several times
    faster than sha256, since every run hashes the segments it reads once more."""
    return xxhash.xxh64()


def content_tag(digest: xxhash.xxh64) -> str:
    return f"{TAG_KIND}:{digest.hexdigest()}"


@dataclass(frozen=True, slots=True)
class LongLine:
    """A line longer than the maximum: its length and first bytes only."""

    length: int
    head: bytes


Line = bytes | LongLine


def preview(line: Line) -> bytes:
    """A record as a dead letter's payload: its first ``PAYLOAD_PREVIEW`` bytes, as they are (the catalog
    stores any bytes: ``coordinator.catalog.models.dead_letter_columns``)."""
    return line.head if isinstance(line, LongLine) else bytes(line[:PAYLOAD_PREVIEW])


def open_segment(path: Path | str | Location) -> BinaryIO:
    """The segment file, opened for reading; a failure is a SourceError naming it."""
    try:
        return path.open("rb") if isinstance(path, Location) else open(path, "rb")  # noqa: SIM115 - the caller closes it
    except FileNotFoundError:
        raise SourceError(f"segment {path} disappeared while it was being read; segments must stay where "
                          f"they landed") from None
    except OSError as exc:
        raise SourceError(f"segment {path} cannot be read: {exc.strerror or exc}") from None


def opened_version(path: Path | str | Location, f: BinaryIO) -> tuple[int, str]:
    """The mtime (ns) of the segment open as ``f`` and its store's version of it (``Location.stat``): '' for a
    local file, whose content tag is hashed from what is read."""
    if not isinstance(path, Location):
        return os.fstat(f.fileno()).st_mtime_ns, ""
    if path.object_store:
        return 0, read_version(f, path)  # the ETag of the very GET being read
    try:
        st = path.stat()
    except FileNotFoundError:
        raise SourceError(f"segment {path} disappeared while it was being read; segments must stay where "
                          f"they landed") from None
    return st.st_mtime_ns, st.version


class SegmentReader:
    """Iterate ``batches()`` once; then ``bytes``, ``checksum`` and ``mtime_ns`` describe what was read."""

    def __init__(self, path: Path | Location, max_line: int | None = None, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.path = path
        self.max_line = max_line_bytes() if max_line is None else max_line
        self.chunk_bytes = chunk_bytes
        self.bytes = 0
        self.checksum = ""
        self.content_tag = ""
        self.mtime_ns = 0

    def lines(self) -> Iterator[Line]:
        for batch, _ in self.batches():
            yield from batch

    def batches(self) -> Iterator[tuple[list[Line], bool]]:
        """The segment's lines in order, a chunk's worth at a time, each batch with whether it
        holds a ``LongLine``."""
        limit = self.max_line
        digest, tag = new_checksum(), new_tag_digest()
        # the line being read across chunks: its first bytes (all of it while within the limit), its length
        carry, carry_len = bytearray(), 0
        with open_segment(self.path) as f:
            self.mtime_ns, version = opened_version(self.path, f)
            while chunk := f.read(self.chunk_bytes):
                digest.update(chunk)
                if not version:
                    tag.update(chunk)
                self.bytes += len(chunk)
                parts = chunk.split(b"\n")
                last = parts.pop()
                if parts:
                    has_long = max(map(len, parts)) > limit
                    lines: list[Line] = [_long(p) if len(p) > limit else p for p in parts] if has_long else parts
                    if carry_len:
                        lines[0] = _join(carry, carry_len, parts[0], limit)
                        has_long = has_long or isinstance(lines[0], LongLine)
                        carry, carry_len = bytearray(), 0
                    yield lines, has_long
                    del parts, lines  # not alive while the next chunk is read and split
                carry_len = _extend(carry, carry_len, last, limit)
            if carry_len:
                line = _join(carry, carry_len, b"", limit)
                yield [line], isinstance(line, LongLine)
        self.checksum, self.content_tag = digest.hexdigest(), version or content_tag(tag)


def _long(line: bytes) -> LongLine:
    return LongLine(len(line), bytes(line[:PAYLOAD_PREVIEW]))


def _extend(carry: bytearray, carry_len: int, part: bytes, limit: int) -> int:
    """Append ``part`` to the unfinished line; past the limit only its preview is kept."""
    carry_len += len(part)
    if carry_len <= limit:
        carry += part
    else:
        del carry[PAYLOAD_PREVIEW:]
        carry += part[: PAYLOAD_PREVIEW - len(carry)]
    return carry_len


def _join(carry: bytearray, carry_len: int, end: bytes, limit: int) -> Line:
    """The unfinished line ``carry`` completed by ``end``."""
    length = carry_len + len(end)
    if length <= limit:
        return bytes(carry) + end
    head = bytes(carry[:PAYLOAD_PREVIEW])
    return LongLine(length, head + end[: PAYLOAD_PREVIEW - len(head)])


def checksum_of(path: Path | str | Location, limit: int | None = None) -> str:
    """The checksum of the file's content (of its first ``limit`` bytes when given), streamed."""
    digest = new_checksum()
    _stream(path, (digest,), limit)
    return digest.hexdigest()


def content_tag_of(path: Path | str | Location) -> str:
    """The file's content tag (``TAG_KIND``), streamed."""
    tag = new_tag_digest()
    _stream(path, (tag,))
    return content_tag(tag)


def checksum_and_tag_of(path: Path | str | Location) -> tuple[str, str]:
    """The file's checksum and content tag (its store's version, ``opened_version``, when it has one), in one
    pass."""
    digest, tag = new_checksum(), new_tag_digest()
    version = _stream(path, (digest, tag))
    return digest.hexdigest(), version or content_tag(tag)


def _stream(path: Path | str | Location, digests: tuple, limit: int | None = None) -> str:
    """Feed the file's content (its first ``limit`` bytes when given) to each of ``digests``; returns its
    store's version ('' for a local file)."""
    left = limit
    with open_segment(path) as f:
        version = opened_version(path, f)[1]
        while left is None or left > 0:
            chunk = f.read(CHUNK_BYTES if left is None else min(CHUNK_BYTES, left))
            if not chunk:
                break
            for digest in digests:
                digest.update(chunk)
            if left is not None:
                left -= len(chunk)
        return version
