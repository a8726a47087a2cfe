"""A Delta table as a source: each table version is a segment, the version reached is the cut.

A Delta source (``absreplay.api.delta_source``) has one partition, ``table`` (``<source>/table`` in a
job with several sources). At inject, every table version after the newest one registered becomes a
segment of it, in version order, named by its version (20 digits, as its commit file in
``_delta_log/``): its records are the rows of the files its ``add`` actions added (``dataChange``
true), file after file in the commit's order, so a record's offset is the segment's first offset plus
the rows of the version's earlier files plus its row index in its file. The segment's checksum is its
identity: the sha256 of the version and its added files (path and size). The barrier's cut is then the
end of the partition, that is the table version reached: epoch *n* holds the rows appended by the
versions registered since barrier *n-1*. A version that adds nothing (a schema change, an OPTIMIZE,
whose files have ``dataChange`` false: the same rows in other files) is an empty segment.

Appends only: a version that removes data (a ``remove`` action with ``dataChange`` true: DELETE,
UPDATE, MERGE, an overwrite, a compaction that says it changed data), or adds a file with a deletion
vector, is refused at inject (SourceError, exit 2) with the version and its operation named, and
nothing of the barrier is registered, as a changed segment file is refused. A registered version is
checked again before a run reads it (``check_before_run``): its commit must still be in the log with
the same added files, and each file must still be there with its size (a VACUUM, a rewritten log, a
table replaced by another at the same URI: refused, naming the version and the file).

A declared field must be a column of the data files (a partition column is not one), of the declared
type; a row with a null in a declared field is a dead letter, as in a Parquet segment. The log and the
files are read through delta-rs' own storage (``deltalake.fs.DeltaStorageHandler``), with the source's
``storage_options``; Spark reads the files (``spark_jobs.records.delta_epochs``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from coordinator.errors import SourceError
from coordinator.keywords import checked_keywords
from coordinator.sinks.locations import expand
from coordinator.sources.record_formats import ParquetFiles
from coordinator.sources.source import checked_parquet_rows

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from coordinator.dataflow.jobs import JobDefinition
    from coordinator.sources.segment_changes import Registered

#: the one partition of a Delta source (``<source>/table`` in a job with several sources)
PARTITION = "table"
APPENDS_ONLY = ("a Delta source reads appends only: write new rows as new versions, and read a table that "
                "is deleted from, updated, merged into or overwritten through its change feed into another "
                "table that is only appended to")


@checked_keywords()
@dataclass(frozen=True)
class DeltaSource(ParquetFiles):
    """A Delta table's appended rows, with the declared ``fields`` (other columns are not read);
    ``time_field`` as for ``JsonLines``. ``uri``: the table (a local path, ``file://``, ``s3://``...; it may
    name ``${VAR}``, read when the table is, as a sink's location);
    ``storage_options``: delta-rs' options for its storage (pairs); ``from_version``: the first version
    read (a table whose log no longer holds its first versions). A kind of ``ParquetFiles``: its records
    are Parquet rows and are parsed as theirs."""

    uri: str = field(default="", kw_only=True)
    storage_options: tuple[tuple[str, str], ...] = field(default=(), kw_only=True, repr=False)
    #: the first version read: the rows of earlier versions are not records of the job
    from_version: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        if not self.uri:
            raise ValueError("a Delta source needs the table's uri (a path, file://, s3://...)")
        if type(self.from_version) is not int or self.from_version < 0:
            raise ValueError(f"Delta source {self.uri}: from_version must be a version (>= 0), "
                             f"not {self.from_version!r}")

    @property
    def options(self) -> dict[str, str] | None:
        return dict(self.storage_options) or None

    @property
    def location(self) -> str:
        """``uri`` with its ``${VAR}`` read from the environment now, as a sink's location is when its
        target is made: importing the job file (Airflow's DAG parser) needs none of them set."""
        return expand(self.uri, "Delta source location")


@dataclass(frozen=True)
class AddedFile:
    #: as in the log: relative to the table's root, percent-encoded
    path: str
    size: int

    @property
    def relative(self) -> str:
        return unquote(self.path)


@dataclass(frozen=True)
class Version:
    """One commit of the table: what a Delta source makes of it."""

    version: int
    operation: str
    timestamp_ms: int
    #: the files it added with ``dataChange`` true, in the commit's order
    added: tuple[AddedFile, ...]
    #: why it is not an append (None: it is one, or adds nothing)
    rewrite: str | None

    @property
    def name(self) -> str:
        return segment_name(self.version)

    @property
    def checksum(self) -> str:
        """The segment's identity: the version and its added files."""
        body = json.dumps([self.version, [[f.path, f.size] for f in self.added]], separators=(",", ":"))
        return hashlib.sha256(body.encode()).hexdigest()


def segment_name(version: int) -> str:
    return f"{version:020d}"


def partitions_of(job: JobDefinition) -> dict[str, DeltaSource]:
    """The partition of each Delta source of ``job``."""
    several = len(job.sources) > 1
    return {f"{name}/{PARTITION}" if several else PARTITION: fmt
            for name, fmt in job.sources if isinstance(fmt, DeltaSource)}


def _operation(commit_info: Mapping[str, Any]) -> str:
    """The commit's operation as its writer named it, e.g. ``WRITE (mode Overwrite)``, ``DELETE``."""
    op = str(commit_info.get("operation") or "an unnamed operation")
    mode = (commit_info.get("operationParameters") or {}).get("mode")
    return f"{op} (mode {mode})" if mode else op


class DeltaLog:
    """A Delta table's log and files, read through delta-rs' storage."""

    def __init__(self, fmt: DeltaSource) -> None:
        self.fmt = fmt
        #: the table itself: its variables read once, so one log never reads two tables
        self.uri = fmt.location

    @cached_property
    def fs(self) -> Any:
        import pyarrow.fs as pafs
        from deltalake.fs import DeltaStorageHandler

        return pafs.PyFileSystem(DeltaStorageHandler(self.uri, self.fmt.options))

    def latest_version(self) -> int:
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError

        try:
            return DeltaTable(self.uri, storage_options=self.fmt.options, without_files=True).version()
        except TableNotFoundError:
            raise SourceError(f"Delta source {self.uri} is not a Delta table (no _delta_log/ there)") from None
        except (DeltaError, OSError) as exc:
            raise SourceError(f"Delta table {self.uri} cannot be read: {str(exc).splitlines()[0]}") from None

    def commit(self, version: int) -> Version | None:
        """Version ``version``'s commit (None: its commit file is not in the log)."""
        import pyarrow as pa

        path = f"_delta_log/{version:020d}.json"
        try:
            if self.fs.get_file_info(path).type.name == "NotFound":
                return None
            with self.fs.open_input_stream(path) as f:
                text = f.read().decode("utf-8")
        except (OSError, pa.ArrowException) as exc:
            raise SourceError(f"Delta table {self.uri}: the commit of version {version} cannot be read: "
                              f"{str(exc).splitlines()[0]}") from None
        info: dict[str, Any] = {}
        added: list[AddedFile] = []
        rewrite = None
        for line in filter(str.strip, text.splitlines()):
            action = json.loads(line)
            if "commitInfo" in action:
                info = action["commitInfo"] or {}
            elif "add" in action and action["add"].get("dataChange", True):
                add = action["add"]
                if "://" in add["path"]:
                    raise SourceError(f"Delta table {self.uri} version {version} adds {add['path']}, a file outside "
                                      f"the table (a shallow clone?): a Delta source reads the table's own files")
                if add.get("deletionVector"):
                    rewrite = f"adds {add['path']} with a deletion vector (rows of it deleted)"
                added.append(AddedFile(add["path"], int(add["size"])))
            elif "remove" in action and action["remove"].get("dataChange", True):
                rewrite = rewrite or f"removes {action['remove']['path']}"
        if rewrite:
            rewrite = f"{_operation(info)}: it {rewrite}"
        return Version(version, _operation(info), int(info.get("timestamp") or 0), tuple(added), rewrite)

    def scan(self, file: AddedFile, version: int) -> tuple[int, list[tuple[int, str, bytes]]]:
        """A file's rows, and its rows with a null in a declared field: (row index, reason, payload).
        SourceError for a file without a declared column, or with another type."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        where = f"Delta table {self.uri} version {version}: file {file.relative}"
        try:
            parquet = pq.ParquetFile(self.fs.open_input_file(file.relative))
        except (OSError, pa.ArrowException) as exc:
            raise SourceError(f"{where} cannot be read as Parquet: {str(exc).splitlines()[0]}") from None
        # a partition column is not in the files: it is missing there
        rows, bad = checked_parquet_rows(parquet, self.fmt.fields, where)
        return rows.num_rows, bad

    def row_counts(self, files: Iterable[AddedFile]) -> list[int]:
        """Each file's rows, from its footer."""
        import pyarrow.parquet as pq

        return [pq.ParquetFile(self.fs.open_input_file(f.relative)).metadata.num_rows for f in files]

    def size_of(self, file: AddedFile) -> int | None:
        info = self.fs.get_file_info(file.relative)
        return None if info.type.name == "NotFound" else info.size


def register_versions(s: Session, job: JobDefinition, checkpoint_id: int, registered: Sequence[Registered],
                      ends: dict[str, int]) -> tuple[int, int]:
    """At inject: every version of each Delta source after its newest registered one becomes a segment
    (added to ``s``, with its dead letters), and ``ends`` moves to the version reached. Returns (new
    segments, new records). SourceError, before anything is added, for a version that is not an append,
    or a table that is no longer the one registered."""
    from coordinator.catalog.models import DeadLetter, SourceSegment, dead_letter_columns

    rows: list[Any] = []
    new_segments = new_records = 0
    for partition, fmt in partitions_of(job).items():
        log = DeltaLog(fmt)
        mine = [seg for seg in registered if seg.partition == partition]
        newest = max(mine, key=lambda seg: seg.name, default=None)
        last = int(newest.name) if newest is not None else fmt.from_version - 1
        latest = log.latest_version()
        if newest is not None and latest < last:
            raise SourceError(f"Delta table {log.uri} is at version {latest}, but version {last} is registered "
                              f"already: the table was replaced; {APPENDS_ONLY}")
        if newest is not None:
            check_version(log, newest, "(the newest registered)")
        offset = ends.get(partition, 0)
        for v in range(last + 1, latest + 1):
            version = log.commit(v)
            if version is None:
                raise SourceError(f"Delta table {log.uri}: the commit of version {v} is not in its log (the log's "
                                  f"retention removed it before any barrier read it): its rows cannot be read; "
                                  f"a new job can start at a later version (from_version)")
            if version.rewrite:
                raise SourceError(f"Delta table {log.uri} version {v} is not an append ({version.rewrite}); "
                                  f"{APPENDS_ONLY}")
            base = 0
            for file in version.added:
                count, bad = log.scan(file, v)
                rows += [DeadLetter(job=job.name, checkpoint_id=checkpoint_id, partition=partition,
                                    segment=version.name, offset=offset + base + i,
                                    **dead_letter_columns(reason, payload))
                         for i, reason, payload in bad]
                base += count
            rows.append(SourceSegment(job=job.name, partition=partition, name=version.name, first_offset=offset,
                                      records=base, bytes=sum(f.size for f in version.added),
                                      checksum=version.checksum, mtime_ns=version.timestamp_ms * 1_000_000))
            offset += base
            new_segments += 1
            new_records += base
        ends[partition] = offset
    s.add_all(rows)
    return new_segments, new_records


def check_version(log: DeltaLog, seg: Registered, purpose: str) -> Version:
    """The registered version ``seg`` as its log says it now; SourceError naming it unless it is the same
    version with the same added files, each still there with its size."""
    v = int(seg.name)
    version = log.commit(v)
    where = f"Delta table {log.uri} version {v} {purpose}"
    if version is None:
        raise SourceError(f"{where}: its commit is gone from the table's log (the log's retention, or the "
                          f"table was replaced): its {seg.records:,} records cannot be read again")
    if version.checksum != seg.checksum:
        raise SourceError(f"{where} has changed: its commit adds other files than when it was registered (the "
                          f"table was replaced at the same location); {APPENDS_ONLY}")
    for file in version.added:
        size = log.size_of(file)
        if size is None:
            raise SourceError(f"{where}: its file {file.relative} is gone (vacuumed?): its records cannot be read "
                              f"again; VACUUM only files no version still needed by a replay reads")
        if size != file.size:
            raise SourceError(f"{where}: its file {file.relative} has {size:,} bytes, its commit says "
                              f"{file.size:,}: it was rewritten")
    return version


def check_before_run(job: JobDefinition, reads: Iterable[tuple[str, Sequence[Registered]]]) -> None:
    """Every Delta version a run will read is as registered (``check_version``); ``reads`` as for
    ``segment_changes.check_before_run``, whose segments of other sources are left to it."""
    delta = partitions_of(job)
    logs = {p: DeltaLog(fmt) for p, fmt in delta.items()}
    for purpose, segments in reads:
        for seg in segments:
            if seg.partition in logs:
                check_version(logs[seg.partition], seg, purpose)


@dataclass(frozen=True)
class EpochFile:
    """A file an epoch reads: where Spark finds it, its name, and its first row's offset."""

    path: str
    name: str
    first_offset: int


def epoch_files(fmt: DeltaSource, segments: Sequence[Registered]) -> list[EpochFile]:
    """The files of the versions ``segments``, each with the offset of its first row."""
    log = DeltaLog(fmt)
    root = log.uri.rstrip("/")
    out: list[EpochFile] = []
    for seg in segments:
        version = log.commit(int(seg.name))
        if version is None or version.checksum != seg.checksum:
            check_version(log, seg, "(read by this epoch)")  # says what changed
        offset = seg.first_offset
        for file, rows in zip(version.added, log.row_counts(version.added), strict=True):
            out.append(EpochFile(f"{root}/{file.relative}", file.relative.rsplit("/", 1)[-1], offset))
            offset += rows
    return out
