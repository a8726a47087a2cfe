"""A file or folder on any filesystem (``filesystems.filesystem``), with the part of ``pathlib.Path``'s
interface the sources use: ``/``, ``name``, ``exists``, ``is_dir``, ``is_file``, ``iterdir``, ``stat`` and
``open``. ``str()`` is its URI, as Spark reads it (``s3a://bucket/key``, ``hdfs://nn:8020/path``).

A listing's entries keep what the listing said of them, so that telling files from folders costs no request
per entry. On an object store a folder is a prefix: it exists while an object is under it, and a key that is
also a prefix (a folder marker, as some stores and S3A's own markers make) is that folder, not a file.

``stat`` gives a version for each file as its store tells changes: an S3 object's ETag (one HEAD), an HDFS
file's modification time and length (one ``getFileInfo``); ``version`` spells it as a segment's content tag
(``source_segments.content_tag``): ``etag:<etag>`` or ``mtime-length:<ms>:<bytes>``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow.fs as pafs

from coordinator.storage import filesystems

ETAG, MTIME_LENGTH = "etag", "mtime-length"


@dataclass(frozen=True)
class Stat:
    st_size: int
    st_mtime_ns: int
    #: the content tag the store gives this file (``etag:...``, ``mtime-length:...``)
    version: str


class Location:
    __slots__ = ("uri", "fs", "path", "_info")

    def __init__(self, uri: str, fs: pafs.FileSystem | None = None, path: str | None = None,
                 info: pafs.FileInfo | None = None) -> None:
        self.uri = uri.rstrip("/")
        if fs is None or path is None:
            fs, path = filesystems.filesystem(self.uri)
        self.fs, self.path, self._info = fs, path, info

    def __truediv__(self, name: str) -> Location:
        return Location(f"{self.uri}/{name}", self.fs, f"{self.path.rstrip('/')}/{name}")

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"Location({self.uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    def __lt__(self, other: Location) -> bool:
        return self.uri < other.uri

    @property
    def name(self) -> str:
        return self.uri.rsplit("/", 1)[-1]

    @property
    def parent(self) -> Location:
        return Location(self.uri.rsplit("/", 1)[0], self.fs, self.path.rsplit("/", 1)[0] or "/")

    @property
    def object_store(self) -> bool:
        return filesystems.is_object_store(self.uri)

    def _type(self) -> pafs.FileType:
        if self._info is None:
            self._info = self.fs.get_file_info(self.path)
        return self._info.type

    def exists(self) -> bool:
        return self._type() != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        return self._type() == pafs.FileType.Directory

    def is_file(self) -> bool:
        return self._type() == pafs.FileType.File

    def iterdir(self) -> Iterator[Location]:
        """The entries of this folder (FileNotFoundError when it is missing), in no set order."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.path))
        folders = {i.base_name for i in infos if i.type == pafs.FileType.Directory}
        for info in infos:
            if info.type == pafs.FileType.File and info.base_name in folders:
                continue  # a folder marker
            yield Location(f"{self.uri}/{info.base_name}", self.fs, info.path, info)

    def stat(self) -> Stat:
        """Size, modification time and version (FileNotFoundError when it is gone)."""
        kind = filesystems.scheme(self.uri)
        if kind in filesystems.HDFS_SCHEMES:
            info = filesystems.hdfs_client(self.uri).info(self.path)
            if info["type"] != "file":
                raise IsADirectoryError(self.uri)
            ms, size = int(info["modification_time"]), int(info["size"])
            return Stat(size, ms * 1_000_000, f"{MTIME_LENGTH}:{ms}:{size}")
        if kind in filesystems.S3_SCHEMES:
            with self.fs.open_input_file(self.path) as head:  # a HEAD request
                return _s3_stat(head.metadata(), head.size())
        info = self.fs.get_file_info(self.path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(self.uri)
        return Stat(info.size, info.mtime_ns or 0, "")

    def open(self, mode: str = "rb") -> BinaryIO:
        if mode != "rb":
            raise ValueError("a Location opens for reading (rb) only; write with write_bytes")
        return self.fs.open_input_stream(self.path)  # type: ignore[return-value]

    def read_bytes(self) -> bytes:
        with self.open() as f:
            return f.read()

    def write_bytes(self, data: bytes) -> None:
        """The whole file at once: on an object store it appears complete or not at all."""
        self.fs.create_dir(self.path.rsplit("/", 1)[0], recursive=True)
        with self.fs.open_output_stream(self.path) as out:
            out.write(data)
        self._info = None

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        self.fs.create_dir(self.path, recursive=parents)
        self._info = None

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            if not missing_ok:
                raise
        self._info = None


def write_whole(target: Path | Location, data: bytes) -> None:
    """Land a file whole under its final name, as a source's landing protocol asks
    (``filesystems.write_whole``: one PUT on an object store, a renamed hidden temporary file elsewhere)."""

    def put(fs: pafs.FileSystem, path: str) -> None:
        with fs.open_output_stream(path) as out:
            out.write(data)

    filesystems.write_whole(str(target), put)
    if isinstance(target, Location):
        target._info = None


def _s3_stat(metadata: dict, size: int) -> Stat:
    etag = (metadata.get("ETag") or b"").decode().strip('"')
    return Stat(size, 0, f"{ETAG}:{etag}")


def read_version(stream: object, location: Location) -> str:
    """The version of the object a read stream of ``location`` is reading (its GET's ETag), else ''."""
    if location.object_store:
        return _s3_stat(stream.metadata(), 0).version  # type: ignore[attr-defined]
    return ""


def at(root: str | Path) -> Path | Location:
    """``root`` as a local ``Path`` (resolved) or a ``Location`` (a URI)."""
    local = filesystems.local_path(str(root))
    return local.expanduser().resolve() if local is not None else Location(str(root))
