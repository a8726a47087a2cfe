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

The client settings (``options``, e.g. ``security.protocol``, ``sasl.*``, ``ssl.*``; values may name
``${VAR}``) reach the coordinator's client (confluent-kafka, librdkafka's property names) and Spark's
(``kafka.``-prefixed Java client properties; ``sasl.username``/``sasl.password`` become a JAAS line there);
they are never stored in the catalog nor shown in a log.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coordinator.errors import SourceError
from coordinator.keywords import checked_keywords
from coordinator.sinks.locations import expand
from coordinator.sources.record_formats import Csv, JsonLines, TextLines
from coordinator.sources.segment_reader import preview

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from coordinator.dataflow.jobs import JobDefinition
    from coordinator.sources.segment_changes import Registered

#: how long a request to the brokers may take before inject or a run gives up, naming them
TIMEOUT_S = 30.0
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
        """The coordinator's client settings (librdkafka's names), ``${VAR}`` read now."""
        return {"bootstrap.servers": self.servers,
                **{k: expand(v, f"Kafka option {k}") for k, v in self.options}}

    def spark_options(self) -> dict[str, str]:
        """The same settings as Spark's Kafka reader takes them (``kafka.`` and Java client names)."""
        conf = {k: expand(v, f"Kafka option {k}") for k, v in self.options}
        user, password = conf.pop("sasl.username", None), conf.pop("sasl.password", None)
        if user is not None:
            module = ("org.apache.kafka.common.security.scram.ScramLoginModule"
                      if conf.get("sasl.mechanism", "").startswith("SCRAM") else
                      "org.apache.kafka.common.security.plain.PlainLoginModule")
            conf.setdefault("sasl.jaas.config", f'{module} required username="{user}" password="{password}";')
        if "ssl.ca.location" in conf:  # a PEM file: the Java client reads it as a PEM trust store
            conf.setdefault("ssl.truststore.location", conf.pop("ssl.ca.location"))
            conf.setdefault("ssl.truststore.type", "PEM")
        return {"kafka.bootstrap.servers": self.servers, **{f"kafka.{k}": v for k, v in conf.items()}}


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


def _kafka_error(fmt: KafkaSource, exc: BaseException, doing: str) -> SourceError:
    text = str(exc.args[0] if getattr(exc, "args", None) else exc)
    return SourceError(f"Kafka source at {fmt.servers}: {doing} failed: {text.splitlines()[0] if text else exc!r}")


class Brokers:
    """One Kafka source's cluster, through confluent-kafka's admin client."""

    def __init__(self, fmt: KafkaSource) -> None:
        from confluent_kafka.admin import AdminClient

        self.fmt = fmt
        self.admin = AdminClient({**fmt.client_config(), "socket.timeout.ms": str(int(TIMEOUT_S * 1000))})

    def _result(self, future: Any, doing: str) -> Any:
        try:
            return future.result(timeout=TIMEOUT_S)
        except Exception as exc:  # KafkaException, a timeout: one line naming the cluster
            raise _kafka_error(self.fmt, exc, doing) from None

    def topics(self) -> dict[str, tuple[str, int]]:
        """Every topic of the source now: name -> (topic id, partitions). SourceError for a named topic
        that does not exist."""
        from confluent_kafka import TopicCollection

        try:
            listed = self.admin.list_topics(timeout=TIMEOUT_S).topics
        except Exception as exc:
            raise _kafka_error(self.fmt, exc, "listing topics") from None
        if self.fmt.pattern is not None:
            names = sorted(t for t in listed if re.fullmatch(self.fmt.pattern, t) and not t.startswith("__"))
        else:
            if missing := [t for t in self.fmt.topics if t not in listed]:
                raise SourceError(f"Kafka source at {self.fmt.servers}: topic(s) {', '.join(missing)} do not exist")
            names = list(self.fmt.topics)
        if not names:
            return {}
        described = self.admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S)
        out = {}
        for name, future in described.items():
            d = self._result(future, f"describing topic {name}")
            out[name] = (str(d.topic_id), len(d.partitions))
        return out

    def offsets(self, partitions: Iterable[tuple[str, int]], spec: str) -> dict[tuple[str, int], int]:
        """Each partition's ``earliest`` offset (the first retained) or ``latest`` stable one (read_committed)."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        wanted = {TopicPartition(t, p): getattr(OffsetSpec, spec)() for t, p in partitions}
        if not wanted:
            return {}
        futures = self.admin.list_offsets(wanted, isolation_level=IsolationLevel.READ_COMMITTED,
                                          request_timeout=TIMEOUT_S)
        return {(tp.topic, tp.partition): self._result(f, f"reading the {spec} offsets of {tp.topic}").offset
                for tp, f in futures.items()}

    def commit_group(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """The consumer group ``group``'s offsets set to ``offsets`` (for the lag tools)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())])
        futures = self.admin.alter_consumer_group_offsets([request], request_timeout=TIMEOUT_S)
        for future in futures.values():
            self._result(future, f"committing the offsets of consumer group {group}")


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


def scan(fmt: KafkaSource, job: str, ranges: Mapping[tuple[str, int], tuple[int, int]]) -> dict[tuple[str, int], ScannedRecords]:
    """Consume every partition's ``ranges`` (first, end) once, read_committed, checking each record as a
    line of a segment file is (``coordinator.sources.source``)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from coordinator.sources.source import BadRecord, IdRecord, _field_id_record

    out = {tp: ScannedRecords() for tp in ranges}
    todo = {tp: rng for tp, rng in ranges.items() if rng[1] > rng[0]}
    if not todo:
        return out
    consumer = Consumer({**fmt.client_config(), "group.id": f"absreplay-inject-{job}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "auto.offset.reset": "error"})
    try:
        consumer.assign([TopicPartition(t, p, first) for (t, p), (first, _) in todo.items()])
        deadline = time.monotonic() + TIMEOUT_S
        while todo:
            batch = consumer.consume(num_messages=10_000, timeout=0.5)
            if batch:
                deadline = time.monotonic() + TIMEOUT_S
            for msg in batch:
                tp = (msg.topic(), msg.partition())
                if msg.error() is not None:
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        raise SourceError(f"Kafka source at {fmt.servers}: reading {tp[0]} partition {tp[1]} "
                                          f"failed: {msg.error().str()}")
                    continue
                if tp not in todo or msg.offset() >= todo[tp][1]:
                    continue
                _check(fmt, msg.offset(), msg.value(), out[tp], BadRecord, IdRecord, _field_id_record)
            for tp in list(todo):
                position = consumer.position([TopicPartition(*tp)])[0].offset
                if position >= todo[tp][1]:
                    del todo[tp]
            if todo and time.monotonic() > deadline:
                waiting = ", ".join(f"{t} partition {p}" for t, p in todo)
                raise SourceError(f"Kafka source at {fmt.servers}: no record of {waiting} arrived for "
                                  f"{TIMEOUT_S:.0f}s, before the end offset the broker gave")
    finally:
        consumer.close()
    return out


def _check(fmt: KafkaSource, offset: int, value: bytes | None, found: ScannedRecords, bad_record, id_record,
           field_id_record) -> None:
    if value is None:
        found.bad.append((offset, "a record without a value (a tombstone)", b""))
        return
    found.bytes += len(value)
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as exc:
        found.bad.append((offset, f"not valid UTF-8 at byte {exc.start} of the value", preview(value)))
        return
    if "\n" in value.decode("utf-8") and not isinstance(fmt.records, JsonLines):
        found.bad.append((offset, "a value of several lines: a record is one line", preview(value)))
        return
    if problem := fmt.problem(value):
        found.bad.append((offset, problem, preview(value)))
    elif fmt.id_field:
        rec = field_id_record(0, value, fmt.records)
        if isinstance(rec, id_record):
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
    id_segments: list[Any] = field(default_factory=list)


def register_offsets(s: Session, job: JobDefinition, checkpoint_id: int, registered: Sequence[Registered],
                     ends: dict[str, int]) -> Registration:
    """At inject: each partition's offsets from its previous cut (its first retained offset for a partition
    new to the job) to its last stable offset become a segment (added to ``s``, with its dead letters), and
    ``ends`` moves there. SourceError, before anything is added, for offsets after the previous cut that
    retention deleted, or a topic that is not the one registered."""
    from coordinator.catalog.models import DeadLetter, SourceSegment, dead_letter_columns
    from coordinator.sources.source import IdRecord, ScannedSegment

    result = Registration()
    rows: list[Any] = []
    for name, fmt in sources_of(job).items():
        brokers = Brokers(fmt)
        topics = brokers.topics()
        mine = {seg.partition: seg for seg in registered if is_kafka_partition(job, seg.partition)
                and job.source_of(seg.partition) == name}
        ids = {topic_partition(p)[0]: seg.checksum for p, seg in mine.items()}
        for topic, topic_id in ids.items():
            if topic in topics and topics[topic][0] != topic_id:
                raise SourceError(f"Kafka topic {topic} at {fmt.servers} is not the topic registered (its id is "
                                  f"{topics[topic][0]}, was {topic_id}): it was deleted and made again, so its offsets "
                                  f"name other records; a new job reads the new topic")
        partitions = [(t, p) for t, (_, n) in topics.items() for p in range(n)]
        earliest = brokers.offsets(partitions, "earliest")
        latest = brokers.offsets(partitions, "latest")
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
        scanned = scan(fmt, job.name, ranges) if fmt.checks_each_line or fmt.id_field else {}
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
        brokers = Brokers(fmt)
        topics = brokers.topics()
        for (t, _), (_, topic_id, purpose) in wanted.items():
            if t not in topics or topics[t][0] != topic_id:
                raise SourceError(f"Kafka topic {t} at {fmt.servers}, read {purpose}, is gone or is another topic "
                                  f"of the same name (deleted and made again): its records cannot be read again")
        earliest = brokers.offsets(wanted, "earliest")
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
            Brokers(fmt).commit_group(fmt.group(job.name), offsets)
        except SourceError as exc:
            warnings.append(str(exc))
    return warnings
