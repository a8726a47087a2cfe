"""Where snapshots live under the state root, and garbage collection of unreferenced ones.

Layout: ``<state root>/<job>/chk-<n>/<operator>/subtask=<i>/part-*.parquet``.
The state root is a local path, ``s3a://`` or ``hdfs://`` (``coordinator.storage.filesystems``). Spark writes the files; the coordinator
only lists and deletes whole checkpoint directories.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from coordinator.storage import filesystems

CHECKPOINT_DIR = re.compile(r"^chk-(\d+)$")


def normalize_root(state_uri: str) -> str:
    """A local path becomes absolute; URIs are kept as they are."""
    if "://" in state_uri:
        return state_uri.rstrip("/")
    return str(Path(state_uri).expanduser().resolve())


def spark_uri(state_uri: str) -> str:
    root = normalize_root(state_uri)
    return root if "://" in root else "file://" + root


def checkpoint_dir(state_uri: str, job: str, checkpoint_id: int) -> str:
    return f"{spark_uri(state_uri)}/{job}/chk-{checkpoint_id}"


def operator_dir(state_uri: str, job: str, checkpoint_id: int, operator: str) -> str:
    return f"{checkpoint_dir(state_uri, job, checkpoint_id)}/{operator}"


def subtask_uri(state_uri: str, job: str, checkpoint_id: int, operator: str, subtask: int) -> str:
    return f"{operator_dir(state_uri, job, checkpoint_id, operator)}/subtask={subtask}"


filesystem = filesystems.filesystem


def checkpoint_dirs(state_uri: str, job: str) -> dict[int, str]:
    """Checkpoint id -> directory URI of every checkpoint directory present for the job."""
    job_root = f"{spark_uri(state_uri)}/{job}"
    fs, path = filesystem(job_root)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.Directory:
        return {}
    found = {}
    for entry in fs.get_file_info(pafs.FileSelector(path)):
        m = CHECKPOINT_DIR.match(entry.base_name)
        if m and entry.type == pafs.FileType.Directory:
            found[int(m.group(1))] = f"{job_root}/{entry.base_name}"
    return found


def delete_dir(uri: str) -> None:
    """Delete a directory tree; one already gone (a concurrent garbage collection) is fine."""
    filesystems.delete_tree(uri)


def exists(uri: str) -> bool:
    fs, path = filesystem(uri)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def newest_per_key(rows: pa.Table, keys: list[str] | tuple[str, ...], newest: str = "updated") -> pa.Table:
    """Of each key's rows (one column or several; a full snapshot and the deltas after it), the one with the
    highest ``newest`` (what a restore keeps: ``updated``, or the checkpoint of the link it was read from),
    sorted by key."""
    rows = rows.take(pc.sort_indices(rows, [*[(k, "ascending") for k in keys], (newest, "descending")]))
    n = rows.num_rows
    if n < 2:
        return rows
    starts = np.zeros(n, dtype=bool)  # the first row of each key: its newest
    starts[0] = True
    for k in keys:
        col = rows.column(k).combine_chunks()
        later, earlier = col.slice(1), col.slice(0, n - 1)
        differs = pc.or_(pc.fill_null(pc.not_equal(later, earlier), False),
                         pc.not_equal(pc.is_null(later), pc.is_null(earlier)))
        starts[1:] |= differs.to_numpy(zero_copy_only=False)
    return rows.filter(pa.array(starts))
