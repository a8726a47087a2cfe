"""Kafka topics as a source: a barrier's cut is every partition's last stable offset.

A Kafka source (``absreplay.api.kafka``) reads the partitions of its topics (named topics, or every topic
whose name matches a pattern); each is a partition of the job named ``<topic>-<n>`` (``<source>/<topic>-<n>``
in a job with several sources), and a record's sequence number is its Kafka offset. At inject every
partition's end is read as a ``read_committed`` consumer sees it (the last stable offset: an open
transaction holds it back) and the offsets from the previous cut to it become one segment of the partition,
named by its first offset (20 digits), in the same catalog transaction as the cut. A partition that
appears between two barriers (a topic that matched the pattern since, partitions added) enters the next cut
from its first offset. A segment's ``records`` are its offsets: with transactions some of them are commit
markers or records of aborted transactions, which no reader sees.

Records are checked at inject as lines of a segment file are, where the declared format checks each record
(JSON, CSV, a text source with ``check=``, an ``id=`` field): the new offsets are consumed once and a value
that is not a record of the job (or a record without a value, a tombstone) is a dead letter. A text source
without a check is not read at inject: Spark decodes its values as UTF-8 (invalid bytes replaced) and skips
tombstones.

Retention: the offsets a run, replay, rewind or verify reads must still be on the broker. Before reading
(``check_before_run``), and at inject for the offsets after the previous cut, a partition whose first
retained offset is past them is an error naming the topic, the partitions and the offsets lost; nothing is
skipped. A segment's checksum is its topic's id, so a topic deleted and made again under the same name
(its offsets start over with other records) is refused too.

The client settings (``options``, e.g. ``security.protocol``, ``sasl.*``, ``ssl.*``) reach the coordinator's
client and Spark's (``coordinator.kafka_cluster``); they are never stored in the catalog nor shown in a log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coordinator import kafka_cluster
from coordinator.errors import SourceError
from coordinator.keywords import checked_keywords
from coordinator.sinks.locations import expand
from coordinator.sources.record_formats import Csv, JsonLines, TextLines
from coordinator.sources.segment_reader import preview
from coordinator.sources.source import IdRecord, ScannedSegment, field_id_record

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from coordinator.dataflow.jobs import JobDefinition
    from coordinator.sources.segment_changes import Registered

#: the client settings that are the source's own (the bootstrap servers, where offsets are committed)
OWN_OPTIONS = ("bootstrap.servers", "group.id", "isolation.level", "enable.auto.commit")
RETENTION = ("raise the topic's retention.ms / retention.bytes so that records stay until their epoch "
             "is committed, or recover from a later checkpoint whose epochs are still retained")


@checked_keywords()
@dataclass(frozen=True)
class KafkaSource:
    """Records of Kafka topics: each record's value is one record of ``records`` (a text line, a JSON
    object, a CSV line). ``topics``: topic names; ``pattern``: a regular expression every topic of the job
    matches whole (one of the two); ``bootstrap_servers``: ``host:port,...``; ``options``: client settings
    (pairs; values may name ``${VAR}``); ``group_id``: the consumer group whose offsets follow the
    committed checkpoints (default ``absreplay-<job>``)."""

    records: TextLines | JsonLines | Csv
    topics: tuple[str, ...] = field(default=(), kw_only=True)
    pattern: str | None = field(default=None, kw_only=True)
    bootstrap_servers: str = field(default="", kw_only=True)
    options: tuple[tuple[str, str], ...] = field(default=(), kw_only=True, repr=False)
    group_id: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.records, TextLines | JsonLines | Csv):
            raise ValueError("a Kafka source's records are text lines, JSON objects or CSV lines "
                             f"(abs.TextLines(), abs.json_lines(...), abs.csv(...)), not {self.records!r}")
        if bool(self.topics) == (self.pattern is not None):
            raise ValueError("a Kafka source reads topics=[...] or a pattern=, one of the two")
        for topic in self.topics:
            if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic):
                raise ValueError(f"Kafka source: {topic!r} is not a topic name (letters, digits, '.', '_', '-')")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"Kafka source: pattern {self.pattern!r} is not a regular expression: {exc}") from None
        if not self.bootstrap_servers:
            raise ValueError("a Kafka source needs bootstrap_servers ('host:port,...'; it may name ${VAR})")
        if own := [k for k, _ in self.options if k in OWN_OPTIONS]:
            raise ValueError(f"Kafka source: options {', '.join(own)} are the source's own: give bootstrap_servers= "
                             "and group_id= instead; it always reads read_committed and commits nothing itself")
        if isinstance(self.records, TextLines) and self.records.id_envelope is not None:
            raise ValueError("a Kafka source's text records have no id envelopes: declare an id field of "
                             "JSON records (abs.json_lines(..., id=...)) instead")

    # what the rest of the runtime asks of a record format: the declared records'
    @property
    def fields(self) -> tuple[tuple[str, str], ...]:
        return getattr(self.records, "fields", ())

    @property
    def time_field(self) -> str | None:
        return self.records.time_field

    @property
    def id_field(self) -> str | None:
        return getattr(self.records, "id_field", None)

    @property
    def checks_each_line(self) -> bool:
        return self.records.checks_each_line

    def problem(self, line: bytes) -> str | None:
        return self.records.problem(line)

    def envelope(self, name: str) -> bool:
        return False

    @property
    def servers(self) -> str:
        return expand(self.bootstrap_servers, "Kafka bootstrap_servers")

    def group(self, job: str) -> str:
        return self.group_id or f"absreplay-{job}"

    def client_config(self) -> dict[str, str]:
        """The coordinator's client settings (``coordinator.kafka_cluster``), ``${VAR}`` read now."""
        return kafka_cluster.client_config(self.bootstrap_servers, self.options)

    def spark_options(self) -> dict[str, str]:
        """The same settings as Spark's Kafka reader takes them."""
        return kafka_cluster.spark_options(self.bootstrap_servers, self.options)

    def cluster(self) -> kafka_cluster.Cluster:
        return kafka_cluster.Cluster(self.client_config(), f"Kafka source at {self.servers}", SourceError)

    def topics_now(self, cluster: kafka_cluster.Cluster) -> dict[str, tuple[str, int]]:
        """Every topic of the source now: name -> (topic id, partitions). SourceError for a named topic
        that does not exist."""
        if self.pattern is not None:
            return cluster.describe(cluster.matching(self.pattern))
        if missing := [t for t in self.topics if t not in cluster.topic_names()]:
            raise SourceError(f"Kafka source at {self.servers}: topic(s) {', '.join(missing)} do not exist")
        return cluster.describe(self.topics)


def partition_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def topic_partition(name: str) -> tuple[str, int]:
    """``<topic>-<n>`` (after a ``<source>/``) back to (topic, n)."""
    topic, _, number = name.rsplit("/", 1)[-1].rpartition("-")
    return topic, int(number)


def sources_of(job: JobDefinition) -> dict[str, KafkaSource]:
    """The Kafka sources of ``job`` by name."""
    return {name: fmt for name, fmt in job.sources if isinstance(fmt, KafkaSource)}


def is_kafka_partition(job: JobDefinition, partition: str) -> bool:
    return isinstance(job.format_of(partition), KafkaSource)


def job_partition(job: JobDefinition, source: str, topic: str, partition: int) -> str:
    name = partition_name(topic, partition)
    return f"{source}/{name}" if len(job.sources) > 1 else name


def segment_name(offset: int) -> str:
    return f"{offset:020d}"


def lost(fmt: KafkaSource, what: str, gone: Mapping[tuple[str, int], tuple[int, int]]) -> SourceError:
    """The error for offsets ``gone`` ((topic, partition) -> (first needed, first retained))."""
    topics: dict[str, list[str]] = {}
    for (topic, p), (first, kept) in sorted(gone.items()):
        topics.setdefault(topic, []).append(f"{p} (offsets {first:,}..{kept - 1:,})")
    where = "; ".join(f"topic {t} partition(s) {', '.join(ps)}" for t, ps in topics.items())
    return SourceError(f"Kafka source at {fmt.servers}: the offsets {what} are no longer on the broker (deleted "
                       f"by retention): {where}; they cannot be read, and nothing was skipped: {RETENTION}")


@dataclass
class ScannedRecords:
    """What inject read of a partition's new offsets: bytes, dead letters and id records, as a segment file's scan."""

    bytes: int = 0
    #: (offset, reason, payload)
    bad: list[tuple[int, str, bytes]] = field(default_factory=list)
    #: (offset, id, event time in seconds)
    ids: list[tuple[int, str, int]] = field(default_factory=list)
    #: the first bytes of each id record, for the dead letters the id store makes of some
    previews: dict[int, bytes] = field(default_factory=dict)


def scan(fmt: KafkaSource, cluster: kafka_cluster.Cluster, job: str,
         ranges: Mapping[tuple[str, int], tuple[int, int]]) -> dict[tuple[str, int], ScannedRecords]:
    """Consume every partition's ``ranges`` (first, end) once, read_committed, checking each record as a
    line of a segment file is (``coordinator.sources.source``)."""
    out = {tp: ScannedRecords() for tp in ranges}
    for msg in cluster.read(ranges, f"absreplay-inject-{job}"):
        _check(fmt, msg.offset(), msg.value(), out[(msg.topic(), msg.partition())])
    return out


def _check(fmt: KafkaSource, offset: int, value: bytes | None, found: ScannedRecords) -> None:
    """One record's value: a dead letter, an id record, or a plain record."""
    if value is None:
        found.bad.append((offset, "a record without a value (a tombstone)", b""))
        return
    found.bytes += len(value)
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        found.bad.append((offset, f"not valid UTF-8 at byte {exc.start} of the value", preview(value)))
        return
    if "\n" in text and not isinstance(fmt.records, JsonLines):
        found.bad.append((offset, "a value of several lines: a record is one line", preview(value)))
        return
    if problem := fmt.problem(value):
        found.bad.append((offset, problem, preview(value)))
    elif fmt.id_field:
        rec = field_id_record(0, value, fmt.records)
        if isinstance(rec, IdRecord):
            found.ids.append((offset, rec.record_id, rec.ts))
            found.previews[offset] = preview(value)
        else:
            found.bad.append((offset, rec.reason, rec.payload))


@dataclass
class Registration:
    """What inject registered of a job's Kafka sources."""

    segments: int = 0
    records: int = 0
    #: segments with id records, each with its first offset, for the id store (``id_store.dead_letters_for``)
    id_segments: list[tuple[ScannedSegment, int]] = field(default_factory=list)


def register_offsets(s: Session, job: JobDefinition, checkpoint_id: int, registered: Sequence[Registered],
                     ends: dict[str, int]) -> Registration:
    """At inject: each partition's offsets from its previous cut (its first retained offset for a partition
    new to the job) to its last stable offset become a segment (added to ``s``, with its dead letters), and
    ``ends`` moves there. SourceError, before anything is added, for offsets after the previous cut that
    retention deleted, or a topic that is not the one registered."""
    from coordinator.catalog.models import DeadLetter, SourceSegment, dead_letter_columns

    result = Registration()
    rows: list[Any] = []
    for name, fmt in sources_of(job).items():
        cluster = fmt.cluster()
        topics = fmt.topics_now(cluster)
        mine = {seg.partition: seg for seg in registered if is_kafka_partition(job, seg.partition)
                and job.source_of(seg.partition) == name}
        ids = {topic_partition(p)[0]: seg.checksum for p, seg in mine.items()}
        for topic, topic_id in ids.items():
            if topic in topics and topics[topic][0] != topic_id:
                raise SourceError(f"Kafka topic {topic} at {fmt.servers} is not the topic registered (its id is "
                                  f"{topics[topic][0]}, was {topic_id}): it was deleted and made again, so its offsets "
                                  f"name other records; a new job reads the new topic")
        partitions = [(t, p) for t, (_, n) in topics.items() for p in range(n)]
        earliest = cluster.offsets(partitions, "earliest")
        latest = cluster.offsets(partitions, "latest")
        ranges, gone = {}, {}
        for t, p in partitions:
            key = job_partition(job, name, t, p)
            first = ends[key] if key in ends else earliest[(t, p)]
            if latest[(t, p)] < first:
                raise SourceError(f"Kafka topic {t} partition {p} at {fmt.servers} ends at offset {latest[(t, p)]:,}, "
                                  f"but offsets up to {first:,} are registered already: the topic was truncated")
            if earliest[(t, p)] > first:
                gone[(t, p)] = (first, earliest[(t, p)])
            ranges[(t, p)] = (first, latest[(t, p)])
        if gone:
            raise lost(fmt, f"barrier {checkpoint_id} would register (after the last cut)", gone)
        scanned = scan(fmt, cluster, job.name, ranges) if fmt.checks_each_line or fmt.id_field else {}
        for (t, p), (first, end) in ranges.items():
            if end == first:
                continue
            key = job_partition(job, name, t, p)
            found = scanned.get((t, p), ScannedRecords())
            seg = segment_name(first)
            rows.append(SourceSegment(job=job.name, partition=key, name=seg, first_offset=first,
                                      records=end - first, bytes=found.bytes, checksum=topics[t][0], mtime_ns=None))
            rows += [DeadLetter(job=job.name, checkpoint_id=checkpoint_id, partition=key, segment=seg, offset=o,
                                **dead_letter_columns(reason, payload)) for o, reason, payload in found.bad]
            if found.ids:
                result.id_segments.append((ScannedSegment(
                    key, seg, None, end - first, found.bytes, topics[t][0], 0,
                    id_records=[IdRecord(o - first, rid, ts) for o, rid, ts in found.ids],
                    previews={o - first: b for o, b in found.previews.items()}), first))
            ends[key] = end
            result.segments += 1
            result.records += end - first
    s.add_all(rows)
    return result


def check_before_run(job: JobDefinition, reads: Iterable[tuple[str, Sequence[Registered]]]) -> None:
    """Every Kafka offset a run will read is still on its broker, in the topic registered; ``reads`` as for
    ``segment_changes.check_before_run``, whose segments of other sources are left to it."""
    needed: dict[str, dict[tuple[str, int], tuple[int, str, str]]] = {}
    for purpose, segments in reads:
        for seg in segments:
            if not is_kafka_partition(job, seg.partition):
                continue
            tp = topic_partition(seg.partition)
            have = needed.setdefault(job.source_of(seg.partition), {}).get(tp)
            if have is None or seg.first_offset < have[0]:
                needed[job.source_of(seg.partition)][tp] = (seg.first_offset, seg.checksum, purpose)
    for name, wanted in needed.items():
        fmt = sources_of(job)[name]
        cluster = fmt.cluster()
        topics = fmt.topics_now(cluster)
        for (t, _), (_, topic_id, purpose) in wanted.items():
            if t not in topics or topics[t][0] != topic_id:
                raise SourceError(f"Kafka topic {t} at {fmt.servers}, read {purpose}, is gone or is another topic "
                                  f"of the same name (deleted and made again): its records cannot be read again")
        earliest = cluster.offsets(wanted, "earliest")
        gone = {tp: (first, earliest[tp]) for tp, (first, _, _) in wanted.items() if earliest[tp] > first}
        if gone:
            purposes = sorted({wanted[tp][2] for tp in gone})
            raise lost(fmt, f"{' and '.join(purposes)} of job {job.name!r}", gone)


def commit_group_offsets(job: JobDefinition, cut: Mapping[str, int]) -> list[str]:
    """Set each Kafka source's consumer group to the committed checkpoint's ``cut``, so that Kafka's lag
    tools show how far behind the job is (the catalog stays what recovery reads). Returns warnings: a broker
    that cannot be reached does not fail a finalize."""
    warnings = []
    for name, fmt in sources_of(job).items():
        offsets = {topic_partition(p): o for p, o in cut.items()
                   if is_kafka_partition(job, p) and job.source_of(p) == name}
        if not offsets:
            continue
        try:
            fmt.cluster().commit_group(fmt.group(job.name), offsets)
        except SourceError as exc:
            warnings.append(str(exc))
    return warnings
