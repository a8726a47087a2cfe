"""Registered segments against their files: is each still what inject read?

inject records every segment's size, content checksum (sha256) and mtime
(``source_segments``). A file whose size and mtime are as recorded is taken as
unchanged without reading it: one ``stat`` per segment (on an object store or
HDFS, its size and the version the store gives: ETag, or modification time and
length; on an object store only where a segment is read, not at every barrier). Otherwise its content
is hashed again: the same content under a new mtime (touched, copied back) is
unchanged; anything else is a change, reported with the segment named
(SourceError, exit code 2), never read silently by one reader and not by the
other. A rewrite that keeps both the size and the mtime is not seen by that
``stat``: a run, a recovery's replay and ``verify`` also hash every segment they
read against its content tag (``check_before_run``), inject does not.

Source retention: a segment may be deleted once it lies entirely before the
cut of the oldest COMPLETED checkpoint, the furthest back any restore,
recovery or rewind replays from (``verify`` alone reads every segment from the
start). A deleted segment that a PENDING epoch or such a replay still needs is
an error; so is a deleted segment whose content reappears under another name
(a rename: its records would get new offsets and count twice), old or not. A
file under a registered name must hold the registered content, so a name
cannot be reused either.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from coordinator.catalog.models import Checkpoint, SourceCut, SourceSegment
from coordinator.checkpoints.lifecycle import CheckpointStatus
from coordinator.errors import SourceError
from coordinator.storage.location import Location
from coordinator.sources.segment_reader import TAG_KIND, checksum_of, content_tag_of

if TYPE_CHECKING:
    from coordinator.dataflow.jobs import JobDefinition

IMMUTABLE = (
    "a segment must not change once it has its final name, and a name is not reused: put the registered "
    "content back and land new data as a new segment"
)


class Registered(Protocol):
    """A ``source_segments`` row (the ORM object or a plain row of its columns)."""

    @property
    def partition(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def first_offset(self) -> int: ...
    @property
    def records(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def checksum(self) -> str | None: ...
    @property
    def mtime_ns(self) -> int | None: ...
    @property
    def content_tag(self) -> str | None: ...


#: the columns a ``Registered`` row needs, to load them without ORM objects (inject reads every one)
REGISTERED_COLUMNS = (SourceSegment.partition, SourceSegment.name, SourceSegment.first_offset, SourceSegment.records,
                      SourceSegment.bytes, SourceSegment.checksum, SourceSegment.mtime_ns, SourceSegment.content_tag)


class Change(StrEnum):
    UNCHANGED = "unchanged"
    #: a new mtime, the same content: nothing to report
    TOUCHED = "touched"
    GONE = "gone"
    APPENDED = "appended"
    TRUNCATED = "truncated"
    #: other content (the same size or not): rewritten, or a new file under a registered name
    REWRITTEN = "rewritten"


@dataclass(frozen=True)
class FileCheck:
    change: Change
    size: int | None = None
    mtime_ns: int | None = None
    #: the store's version of the file now (``Location.stat``), '' for a local file
    version: str = ""

    @property
    def ok(self) -> bool:
        return self.change in (Change.UNCHANGED, Change.TOUCHED)


def check_file(seg: Registered, path: Path | Location) -> FileCheck:
    """Compare the file at ``path`` with the registered segment ``seg`` (hashing only when its size or
    version differ: its mtime, or on an object store or HDFS the version the store gives, ``Location.stat``).
    A segment registered before checksums were recorded is compared by size alone."""
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return FileCheck(Change.GONE)
    except OSError as exc:
        raise SourceError(f"segment {path} cannot be read: {exc.strerror or exc}") from None
    size, mtime, version = st.st_size, st.st_mtime_ns, getattr(st, "version", "")
    if version:  # the store's own version, spelled as the content tag inject recorded from it
        same = version == seg.content_tag
    else:
        same = mtime == seg.mtime_ns
    if size == seg.bytes and (same or seg.checksum is None):
        return FileCheck(Change.UNCHANGED, size, mtime, version)
    if size < seg.bytes or seg.checksum is None:  # without a checksum, the size is all there is to go by
        return FileCheck(Change.TRUNCATED if size < seg.bytes else Change.APPENDED, size, mtime, version)
    # the registered bytes are the file's first ones: the same content, or lines appended to it
    same_start = checksum_of(path, seg.bytes) == seg.checksum
    if size == seg.bytes:
        return FileCheck(Change.TOUCHED if same_start else Change.REWRITTEN, size, mtime, version)
    return FileCheck(Change.APPENDED if same_start else Change.REWRITTEN, size, mtime, version)


def describe(seg: Registered, found: FileCheck) -> str:
    """What happened to the segment, as the middle of a message that names it."""
    if found.change is Change.GONE:
        return f"was registered at inject ({seg.bytes:,} bytes) and is gone"
    sizes = f"{seg.bytes:,} bytes registered, {found.size:,} now"
    if found.change is Change.APPENDED:
        return f"changed after inject: {sizes} (appended)"
    if found.change is Change.TRUNCATED:
        return f"changed after inject: {sizes} (truncated or replaced)"
    if found.size == seg.bytes:
        return f"changed after inject: the same size ({seg.bytes:,} bytes) but other content (its sha256 differs)"
    return f"changed after inject: {sizes}, with other content (its sha256 differs)"


def other_content(seg: Registered, path: Path | str) -> str | None:
    """The file's content tag when it is not the registered one (None: it is, or the segment has none,
    registered before revision 0010). Reads the whole file."""
    if seg.content_tag is None:
        return None
    kind = seg.content_tag.split(":", 1)[0]
    if kind != TAG_KIND:
        raise SourceError(f"segment {path} has a content tag of kind {kind!r}, which this version of ABS Replay "
                          f"cannot check (it checks {TAG_KIND!r})")
    now = content_tag_of(path)
    return None if now == seg.content_tag else now


def check_before_run(job: JobDefinition, root: Path | Location, reads: Iterable[tuple[str, Sequence[Registered]]]) -> None:
    """Every segment a run will read is as registered: its size and mtime, then its content against its
    content tag, each file read once more here (on an object store or HDFS, the version the store gives is
    its content tag: one request per segment, nothing read). Spark's readers cannot check it instead: the line reader
    splits a file across tasks and the Parquet reader reads a file's columns, not its bytes. ``reads``:
    (what reads them, e.g. "of epoch 3", the segments). SourceError names the first that is not, with its
    job and source."""
    for purpose, segments in reads:
        for seg in segments:
            path = root / seg.partition / seg.name
            where = f"job {job.name!r}, source {job.source_of(seg.partition)!r}: segment {path} {purpose}"
            found = check_file(seg, path)
            if found.change is Change.GONE:
                raise SourceError(f"{where} {describe(seg, found)}: segments must stay where they landed (put it "
                                  f"back, unchanged)")
            if not found.ok:
                raise SourceError(f"{where} {describe(seg, found)}; {IMMUTABLE}")
            # a new mtime was hashed already (``check_file``): only an unchanged stat can hide a rewrite
            if found.change is Change.UNCHANGED and not found.version and (now := other_content(seg, path)):
                raise SourceError(f"{where} changed after inject: the same size ({seg.bytes:,} bytes) and mtime but "
                                  f"other content (its content tag is {now}, {seg.content_tag} registered); "
                                  f"{IMMUTABLE}")


@dataclass
class RegisteredFiles:
    """What inject found of the registered segments: gone, or touched (same content, new mtime)."""

    vanished: list[Registered] = field(default_factory=list)
    #: (segment, its mtime now, its store's version now or '')
    touched: list[tuple[Registered, int, str]] = field(default_factory=list)


def check_registered(
    registered: Iterable[Registered], root: Path | Location, listed: Mapping[str, Collection[str]]
) -> RegisteredFiles:
    """At inject: every registered segment that ``listed`` (partition -> names on disk now) still shows
    must be as registered (SourceError naming it otherwise). Returns the vanished ones and the merely
    touched ones with their new mtime (recorded, so they are not hashed again).

    On an object store a listed object is taken as registered here: a HEAD of every segment of the input
    on every barrier would cost requests without bound, and what reads a segment checks its size and ETag
    first (``check_before_run``), so a rewritten object is still never read as something else."""
    out = RegisteredFiles()
    by_listing = isinstance(root, Location) and root.object_store
    for seg in registered:
        path = root / seg.partition / seg.name
        if seg.name not in listed.get(seg.partition, ()):
            found = FileCheck(Change.GONE)
        elif by_listing:
            continue
        else:
            found = check_file(seg, path)
        if found.change is Change.GONE:
            out.vanished.append(seg)
        elif found.change is Change.TOUCHED:
            out.touched.append((seg, found.mtime_ns, found.version))
        elif not found.ok:
            raise SourceError(f"segment {path} {describe(seg, found)}; {IMMUTABLE}")
    return out


class RenameCheck:
    """Vanished segments by content: a new segment with the content of one of them is that one renamed."""

    def __init__(self, root: Path | Location, vanished: Iterable[Registered]) -> None:
        self.root = root
        # empty segments carry no records to count twice, and all look alike
        self.by_content = {(seg.bytes, seg.checksum): seg for seg in vanished if seg.checksum and seg.bytes}

    def check(self, partition: str, name: str, size: int, checksum: str) -> None:
        old = self.by_content.get((size, checksum))
        if old is not None:
            raise SourceError(
                f"segment {self.root / old.partition / old.name} was renamed to {self.root / partition / name} "
                f"after inject (the same {size:,} bytes, the same sha256): its records would be counted twice; "
                f"give it back its registered name"
            )


def replay_horizon(s: Session, job: str) -> tuple[int | None, dict[str, int]]:
    """The oldest COMPLETED checkpoint and its cut: segments entirely before it are never read again
    (None, {}: nothing has completed, every segment is needed)."""
    oldest = s.scalar(
        select(func.min(Checkpoint.checkpoint_id)).where(
            Checkpoint.job == job, Checkpoint.status == CheckpointStatus.COMPLETED
        )
    )
    if oldest is None:
        return None, {}
    cut = s.execute(
        select(SourceCut.partition, SourceCut.offset).where(SourceCut.job == job, SourceCut.checkpoint_id == oldest)
    ).all()
    return oldest, {p: o for p, o in cut}


def is_needed(seg: Registered, horizon: Mapping[str, int]) -> bool:
    """Whether a replay from the horizon's cut reads the segment (the store's ``segments_between``
    takes every segment that starts at or after the cut)."""
    end = horizon.get(seg.partition, 0)
    return seg.first_offset >= end or seg.first_offset + seg.records > end


def check_vanished(s: Session, job: str, root: Path | Location, vanished: Sequence[Registered]) -> None:
    """At inject: a vanished segment is an error unless source retention allows deleting it."""
    if not vanished:
        return
    oldest, horizon = replay_horizon(s, job)
    for seg in vanished:
        if not is_needed(seg, horizon):
            continue
        offsets = (
            f"offsets {seg.first_offset:,} to {seg.first_offset + seg.records - 1:,} of partition {seg.partition}"
            if seg.records
            else f"no records, at offset {seg.first_offset:,} of partition {seg.partition}"
        )
        why = (
            "no checkpoint has completed yet, so every segment is still needed"
            if oldest is None
            else f"it is not entirely before the cut of checkpoint {oldest}, the oldest completed one, from which "
                 f"a recovery or rewind replays"
        )
        raise SourceError(
            f"segment {root / seg.partition / seg.name} ({offsets}) was registered at inject and is gone, but it is "
            f"still needed: {why}; put it back, unchanged (only segments entirely before the oldest completed "
            f"checkpoint's cut may be deleted)"
        )
