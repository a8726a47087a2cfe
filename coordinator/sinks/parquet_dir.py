"""A Parquet directory as a sink target: committed atomically per checkpoint.

Layout (one directory belongs to one (job, sink), named in its owner file):

    <path>/_abs_sink.json                                  the owner {"job", "sink", "key"}, made by the first write
    <path>/generation=<G>/checkpoint_id=<N>/part-0.parquet one committed checkpoint's rows (zero rows still commits)
    <path>/_stage-<uuid>/                                  work in progress: readers skip it, the next write removes it

Only the highest generation is live. A commit writes the checkpoint's file under a staging name,
fsyncs it, and renames it into the live generation: readers see the whole checkpoint or none of it,
and the checkpoint directories themselves are the commit record (``committed_through`` is the newest
one). A checkpoint that deletes keys (tombstones, ``coordinator.sinks.deletes``) of a keyed sink writes its
new version whole: the content without those keys, its rows upserted, as one compacted checkpoint of the
next generation, published as a revert is. A revert builds the whole new content as the next generation under a staging name (keyed:
``rows`` as one compacted checkpoint ``N``; append: hard links to the files of the checkpoints it
keeps, those not of the epochs after N's whatever their ids, and an empty checkpoint ``N`` if it has
none) and renames it into place. That rename is the one moment the content changes, so a commit or
revert that dies at any step leaves the old content or the new one, never a mix, and running it again
converges. Older generations and stale staging directories go after the rename or with the next write.
A revert of an append sink that holds no checkpoint of a later epoch changes nothing.

Reading it without ABS Replay: ``pyarrow.dataset.dataset(path, partitioning="hive")``, keep the rows of
the highest ``generation``, and for a keyed sink the row of the highest ``checkpoint_id`` per key.
A reader listing the directory while a revert swaps generations may find a file gone: read again.

One writer at a time (the coordinator commits a sink in checkpoint order under its lease), on a local
POSIX file system: the commit relies on its atomic rename, hard links and fsync.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Collection
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from coordinator.checkpoints.manifests import fsync
from coordinator.errors import ConfigError, SinkSchemaError
from coordinator.sinks import deletes
from coordinator.sinks.base import schema_difference
from coordinator.storage import filesystems

OWNER_FILE = "_abs_sink.json"
PART = "part-0.parquet"
STAGE_PREFIX = "_stage-"
#: the directory names readers see as hive partitions: a sink column may not be named like them
PARTITION_COLUMNS = ("generation", "checkpoint_id")
_GENERATION = re.compile(r"generation=(\d+)")
_CHECKPOINT = re.compile(r"checkpoint_id=(\d+)")


def _numbered(parent: Path | None, pattern: re.Pattern[str]) -> dict[int, Path]:
    """The subdirectories of ``parent`` named by ``pattern``, by number, ascending."""
    if parent is None or not parent.is_dir():
        return {}
    found = {int(m.group(1)): e for e in parent.iterdir() if (m := pattern.fullmatch(e.name)) and e.is_dir()}
    return dict(sorted(found.items()))


def _type_name(t: pa.DataType) -> str:
    """A column's type as the directory's files and the declaration are compared: a list's items unnamed,
    since Parquet names them ``element`` where Arrow says ``item``."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{_type_name(t.value_type)}>"
    return str(t)


def _types(schema: pa.Schema) -> dict[str, str]:
    return {f.name: _type_name(f.type) for f in schema}


def _owner_key(owner: dict) -> tuple[str, ...] | None:
    """The key an owner record names: a list of columns (a single column's name, as older records say it)."""
    key = owner.get("key")
    return None if key is None else (key,) if isinstance(key, str) else tuple(key)


def _named(key: tuple[str, ...] | None) -> str:
    return ", ".join(map(repr, key)) if key else "nothing (an append sink)"


class ParquetDirectory:
    def __init__(self, path: str | Path, schema: pa.Schema, key: tuple[str, ...] | None) -> None:
        if filesystems.scheme(str(path)) != "file":
            raise ConfigError(f"Parquet directory sink {path}: it commits by renaming folders, which an object "
                              f"store or HDFS cannot do atomically; put it on a local or mounted file system, or "
                              f"use abs.DeltaTable({str(path)!r}), which commits on any store")
        self.path = Path(str(path).removeprefix("file://"))
        self.schema = schema
        self.key = key

    def describe(self) -> str:
        return f"Parquet directory {self.path}"

    def prepare(self) -> None:
        if clash := [c for c in PARTITION_COLUMNS if c in self.schema.names]:
            raise SinkSchemaError(f"{self.describe()}: the sink declares column(s) {', '.join(clash)}, which the "
                                  f"directory's layout uses as partition names: rename the column(s)")
        self.path.mkdir(parents=True, exist_ok=True)
        owner = self._owner()
        if owner is not None and _owner_key(owner) != self.key:
            raise SinkSchemaError(f"{self.describe()} holds a sink keyed by {_named(_owner_key(owner))}, the sink "
                                  f"declares key {_named(self.key)}; nothing was written: point the sink at another "
                                  f"directory")
        foreign = sorted(e.name for e in self.path.iterdir()
                         if not e.name.startswith(("_", ".")) and not _GENERATION.fullmatch(e.name))
        if foreign:
            raise SinkSchemaError(f"{self.describe()} holds {', '.join(foreign[:3])}, which are not ABS Replay "
                                  f"checkpoints; nothing was written: point the sink at an empty or new directory")
        checkpoints = _numbered(self._live(), _CHECKPOINT)
        if checkpoints:
            newest = checkpoints[max(checkpoints)] / PART
            if diff := schema_difference(_types(self.schema), _types(pq.read_schema(newest))):
                raise SinkSchemaError(f"{self.describe()} has other columns than the sink declares ({diff}); "
                                      f"nothing was written: rename the directory or make the declaration match it")

    def committed_through(self, job: str, sink: str) -> int | None:
        self._check_owner(self._owner(), job, sink)
        checkpoints = _numbered(self._live(), _CHECKPOINT)
        return max(checkpoints) if checkpoints else None

    def commit(self, job: str, sink: str, checkpoint_id: int, rows: pa.Table) -> bool:
        self._claim(job, sink)
        self._tidy()
        through = self.committed_through(job, sink)
        if through is not None and checkpoint_id <= through:
            return False
        rows, tombstones = deletes.split(rows)
        if tombstones.num_rows and self.key is not None and self._holds_any(tombstones):
            self._rewrite(checkpoint_id, rows, tombstones)
            return True
        live = self._live()
        if live is None:  # the first commit: an empty generation is empty content
            live = self.path / "generation=1"
            live.mkdir()
            fsync(self.path)
        stage = self._stage()
        self._write(stage / PART, rows)
        self._publish(stage, live / f"checkpoint_id={checkpoint_id}")
        return True

    def revert(self, job: str, sink: str, checkpoint_id: int, rows: pa.Table, later: Collection[int]) -> int:
        self._claim(job, sink)
        self._tidy()
        live = self._live()
        checkpoints = _numbered(live, _CHECKPOINT)
        stage = self._stage()
        if self.key is None:
            # by epoch, not by id: a checkpoint below ``checkpoint_id`` may hold a later epoch's rows
            dropped = [p for n, p in checkpoints.items() if n in later]
            if not dropped:
                return 0
            touched = sum(pq.read_metadata(p / PART).num_rows for p in dropped)
            stage.mkdir()
            for n, p in checkpoints.items():
                if n not in later:  # a hard link: the kept checkpoints are not copied
                    (stage / p.name).mkdir()
                    os.link(p / PART, stage / p.name / PART)
                    fsync(stage / p.name)
            if checkpoint_id not in checkpoints:  # the record reads the checkpoint, and the generation has a file
                self._write(stage / f"checkpoint_id={checkpoint_id}" / PART, self.schema.empty_table())
        else:
            self._write(stage / f"checkpoint_id={checkpoint_id}" / PART, rows)
            touched = rows.num_rows
        fsync(stage)
        generation = max(_numbered(self.path, _GENERATION), default=0) + 1
        self._publish(stage, self.path / f"generation={generation}")
        self._tidy()
        return touched

    def read(self) -> pa.Table:
        parts = [self._conform(pq.read_table(p / PART)) for p in _numbered(self._live(), _CHECKPOINT).values()]
        if not parts:
            return self.schema.empty_table()
        rows = pa.concat_tables(parts)
        if self.key is None:
            return rows
        # checkpoint order in, so each key's last row is its newest; taken by position, since Arrow's "last"
        # aggregate has no kernel for list columns
        positions = rows.select(list(self.key)).append_column("_position", pa.array(np.arange(rows.num_rows)))
        return rows.take(positions.group_by(list(self.key)).aggregate([("_position", "max")]).column("_position_max"))

    def _keys(self, rows: pa.Table) -> list[tuple]:
        return list(zip(*(rows.column(c).to_pylist() for c in self.key), strict=True)) if rows.num_rows else []

    def _holds_any(self, tombstones: pa.Table) -> bool:
        return bool(set(self._keys(tombstones)) & set(self._keys(self.read())))

    def _rewrite(self, checkpoint_id: int, rows: pa.Table, tombstones: pa.Table) -> None:
        """A checkpoint that deletes keys: the whole new content (what readers see now, ``rows`` upserted,
        the tombstones' keys gone) as the next generation, one compacted checkpoint ``checkpoint_id``,
        published by one rename as a revert is."""
        gone = set(self._keys(tombstones))
        fresh = self._conform(rows)
        replaced = gone | set(self._keys(fresh))
        current = self.read()
        kept = current.filter(pa.array([k not in replaced for k in self._keys(current)], pa.bool_()))
        stage = self._stage()
        self._write(stage / f"checkpoint_id={checkpoint_id}" / PART, pa.concat_tables([kept, fresh]))
        fsync(stage)
        generation = max(_numbered(self.path, _GENERATION), default=0) + 1
        self._publish(stage, self.path / f"generation={generation}")
        self._tidy()

    # the steps

    def _live(self) -> Path | None:
        generations = _numbered(self.path, _GENERATION)
        return generations[max(generations)] if generations else None

    def _stage(self) -> Path:
        return self.path / f"{STAGE_PREFIX}{uuid.uuid4().hex}"

    def _conform(self, rows: pa.Table) -> pa.Table:
        return rows.select(self.schema.names).cast(self.schema)

    def _write(self, file: Path, rows: pa.Table) -> None:
        """Write ``rows`` as ``file`` (its directories made) and make it durable."""
        file.parent.mkdir(parents=True)
        with open(file, "wb") as out:
            pq.write_table(self._conform(rows), out)
            out.flush()
            os.fsync(out.fileno())
        fsync(file.parent)

    def _publish(self, stage: Path, final: Path) -> None:
        """The commit point: one rename makes the staged directory visible, whole."""
        os.rename(stage, final)
        fsync(final.parent)
        if stage.parent != final.parent:
            fsync(stage.parent)

    def _tidy(self) -> None:
        """Remove what a dead write left: staging entries and generations older than the live one."""
        for entry in self.path.glob(f"{STAGE_PREFIX}*"):
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        generations = _numbered(self.path, _GENERATION)
        for number in list(generations)[:-1]:
            shutil.rmtree(generations[number])

    def _owner(self) -> dict[str, str | None] | None:
        try:
            return json.loads((self.path / OWNER_FILE).read_text())
        except FileNotFoundError:
            return None

    def _check_owner(self, owner: dict[str, str | None] | None, job: str, sink: str) -> None:
        if owner is not None and (owner.get("job"), owner.get("sink")) != (job, sink):
            raise SinkSchemaError(f"{self.describe()} belongs to sink {owner.get('sink')!r} of job "
                                  f"{owner.get('job')!r}, not to sink {sink!r} of job {job!r}; nothing was written: "
                                  f"give each sink its own directory")

    def _claim(self, job: str, sink: str) -> None:
        """Name (job, sink) the directory's owner, unless another owns it. The owner file is made by
        linking a complete temporary file: readers never see half of it, two claimants never both win."""
        owner = self._owner()
        if owner is None:
            self.path.mkdir(parents=True, exist_ok=True)
            draft = self.path / f"{STAGE_PREFIX}{uuid.uuid4().hex}.json"
            with open(draft, "w") as out:
                json.dump({"job": job, "sink": sink, "key": list(self.key) if self.key else None}, out)
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(draft, self.path / OWNER_FILE)
            except FileExistsError:
                pass
            finally:
                draft.unlink()
            fsync(self.path)
            owner = self._owner()
        self._check_owner(owner, job, sink)
