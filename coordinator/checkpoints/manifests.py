"""Durable, verifiable checkpoint files: what a snapshot's staged output was when it was acked.

Before a checkpoint is acked, ``seal`` makes its files durable and describes them:

- on a local path every file and every directory up to the job's root is fsynced
  (a power loss after the ack cannot lose a file the catalog points at); on
  object stores a file is durable once its writer closed it;
- a ``_manifest.json`` beside the data files lists each one (relative path,
  bytes, rows from its Parquet footer, sha256), and the catalog keeps the
  manifest's own sha256, file count and bytes with the sink transaction.

``verified`` reads the files back for a commit and checks them against the
manifest and the catalog: a missing, truncated, replaced or extra file raises
``StagedOutputError`` naming the checkpoint and the file, before anything is
written. Names starting with ``.`` or ``_`` (Spark's ``.crc`` and ``_SUCCESS``)
are not data, as for every Parquet reader.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from coordinator.checkpoints import state_files
from coordinator.storage import filesystems
from coordinator.errors import AbsError

MANIFEST = "_manifest.json"
CHUNK = 1 << 20


@dataclass(frozen=True)
class Manifest:
    files: int
    bytes: int
    #: sha256 of the manifest file's content
    checksum: str
    #: each data file's bytes, by its path relative to the sealed folder
    sizes: dict[str, int] = field(default_factory=dict, compare=False)

    def bytes_under(self, folder: str) -> int:
        """The bytes of the data files under ``folder`` (relative to the sealed folder)."""
        return sum(size for path, size in self.sizes.items() if path.startswith(folder.rstrip("/") + "/"))


class StagedOutputError(AbsError):
    """A completed checkpoint's staged files are not what its ack recorded: nothing was committed."""

    def __init__(self, job: str, checkpoint_id: int, problem: str, way_on: str) -> None:
        super().__init__(
            f"staged output of checkpoint {checkpoint_id} of job {job!r} does not match its ack: {problem}; "
            f"nothing of it was committed and the high-water marks are unchanged: {way_on}"
        )
        self.job, self.checkpoint_id = job, checkpoint_id


def _is_data(relative: str) -> bool:
    return not any(part.startswith((".", "_")) for part in relative.split("/"))


def _listing(fs: pafs.FileSystem, root: str) -> list[str]:
    """Relative paths of the data files under ``root`` (sorted)."""
    return sorted(rel for f in filesystems.files_under(fs, root) if _is_data(rel := f.path[len(root):].lstrip("/")))


def _fsync_tree(root: str, stop_at: str) -> None:
    """fsync every file and directory under ``root``, then the directories up to ``stop_at``."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            fsync(os.path.join(dirpath, name))
        fsync(dirpath)
    parent = os.path.dirname(root.rstrip("/"))
    while parent.startswith(stop_at) and parent != os.path.dirname(parent):
        fsync(parent)
        if parent == stop_at:
            break
        parent = os.path.dirname(parent)


def fsync(path: str | os.PathLike) -> None:
    """Make a local file's content, or a directory's entries, durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rows(fs: pafs.FileSystem, path: str, tail: bytes, size: int) -> int:
    """The rows of a Parquet file from its footer: in ``tail`` (its last bytes, read already) when the footer
    fits there, so that an object is not fetched twice; else read from the file."""
    footer = int.from_bytes(tail[-8:-4], "little") + 8 if len(tail) >= 8 else size + 1
    if footer <= len(tail):
        return pq.read_metadata(pa.BufferReader(tail)).num_rows
    with fs.open_input_file(path) as file:
        return pq.read_metadata(file).num_rows


def seal(uri: str, job_root: str) -> Manifest:
    """Make the files under ``uri`` durable and write their manifest; returns what the ack records.
    ``job_root``: the job's directory under the state root (directories up to it are fsynced)."""
    fs, root = state_files.filesystem(uri)
    entries = []
    for rel in _listing(fs, root):
        digest, size, tail = hashlib.sha256(), 0, b""
        with fs.open_input_stream(f"{root}/{rel}") as stream:  # streamed: a full snapshot may be large
            while chunk := stream.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
                tail = (tail + chunk)[-CHUNK:]
        entries.append({"path": rel, "bytes": size, "rows": _rows(fs, f"{root}/{rel}", tail, size),
                        "sha256": digest.hexdigest()})
    content = json.dumps({"files": entries}, sort_keys=True, indent=1).encode()
    if not filesystems.is_object_store(uri):  # an object store has no folders to make
        fs.create_dir(root, recursive=True)
    with fs.open_output_stream(f"{root}/{MANIFEST}") as out:
        out.write(content)
    if isinstance(fs, pafs.LocalFileSystem):
        _fsync_tree(root, state_files.filesystem(job_root)[1])
    return Manifest(len(entries), sum(e["bytes"] for e in entries), hashlib.sha256(content).hexdigest(),
                    {e["path"]: e["bytes"] for e in entries})


def make_durable(uri: str, job_root: str) -> None:
    """fsync the files under ``uri`` (a local path) and the directories up to ``job_root``."""
    fs, root = state_files.filesystem(uri)
    if isinstance(fs, pafs.LocalFileSystem) and fs.get_file_info(root).type == pafs.FileType.Directory:
        _fsync_tree(root, state_files.filesystem(job_root)[1])


def verified(uri: str, checksum: str, job: str, checkpoint_id: int,
             way_on: Callable[[], str]) -> list[tuple[str, bytes]]:
    """The data files under ``uri`` as (relative path, content), each checked against the manifest
    whose sha256 the catalog recorded (StagedOutputError names the first file that differs and,
    from ``way_on``, how to get past it)."""
    fs, root = state_files.filesystem(uri)

    def fail(problem: str) -> StagedOutputError:
        return StagedOutputError(job, checkpoint_id, problem, way_on())

    try:
        content = fs.open_input_stream(f"{root}/{MANIFEST}").readall()
    except (FileNotFoundError, OSError):
        raise fail(f"its manifest {uri}/{MANIFEST} is missing") from None
    if hashlib.sha256(content).hexdigest() != checksum:
        raise fail(f"its manifest {uri}/{MANIFEST} was changed after the ack")
    expected = {e["path"]: e for e in json.loads(content)["files"]}
    present = set(_listing(fs, root))
    for extra in sorted(present - set(expected)):
        raise fail(f"file {uri}/{extra} was not part of it")
    files = []
    for rel, entry in sorted(expected.items()):
        where = f"{uri}/{rel}"
        if rel not in present:
            raise fail(f"file {where} ({entry['bytes']:,} bytes) is missing")
        data = fs.open_input_stream(f"{root}/{rel}").readall()
        if len(data) != entry["bytes"]:
            raise fail(f"file {where} has {len(data):,} bytes, {entry['bytes']:,} were acked")
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise fail(f"file {where} has other content than was acked (sha256 differs)")
        files.append((rel, data))
    return files
