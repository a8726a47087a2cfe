"""A Kafka cluster as the coordinator reaches it: confluent-kafka (librdkafka) for topics, offsets, group
offsets and reading records read_committed; and the same client settings as Spark's Kafka connector takes
them. Used by the Kafka source (``coordinator.sources.kafka_source``) and the Kafka sink
(``coordinator.sinks.kafka_topic``).

Settings are Kafka client properties by librdkafka's names (``security.protocol``, ``sasl.mechanism``,
``sasl.username``, ``sasl.password``, ``ssl.ca.location``...); their values may name ``${VAR}``, read when
the cluster is reached (``coordinator.sinks.locations.expand``), so a job file holds no secret. For Spark
they become ``kafka.``-prefixed Java client properties: a user name and password a JAAS line, a CA file a
PEM trust store.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from coordinator.sinks.locations import expand

#: how long a request to the brokers may take before the command gives up, naming them
TIMEOUT_S = 30.0


def client_config(servers: str, options: Iterable[tuple[str, str]]) -> dict[str, str]:
    """librdkafka's settings: the bootstrap servers and ``options``, ``${VAR}`` read now."""
    return {"bootstrap.servers": expand(servers, "Kafka bootstrap_servers"),
            **{k: expand(v, f"Kafka option {k}") for k, v in options}}


def spark_options(servers: str, options: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The same settings as Spark's Kafka connector takes them (``kafka.`` and the Java client's names)."""
    conf = {k: expand(v, f"Kafka option {k}") for k, v in options}
    user, password = conf.pop("sasl.username", None), conf.pop("sasl.password", None)
    if user is not None:
        module = ("org.apache.kafka.common.security.scram.ScramLoginModule"
                  if conf.get("sasl.mechanism", "").startswith("SCRAM") else
                  "org.apache.kafka.common.security.plain.PlainLoginModule")
        conf.setdefault("sasl.jaas.config", f'{module} required username="{user}" password="{password}";')
    if "ssl.ca.location" in conf:  # a PEM file: the Java client reads it as a PEM trust store
        conf.setdefault("ssl.truststore.location", conf.pop("ssl.ca.location"))
        conf.setdefault("ssl.truststore.type", "PEM")
    return {"kafka.bootstrap.servers": expand(servers, "Kafka bootstrap_servers"),
            **{f"kafka.{k}": v for k, v in conf.items()}}


class Cluster:
    """One cluster through an admin client kept for the object's life (a collected client fails the
    requests it made). Every failure is ``error`` (the caller's kind: a source's, a sink's) with one line
    naming ``where`` and what was being done."""

    def __init__(self, config: Mapping[str, str], where: str, error: type[Exception]) -> None:
        from confluent_kafka.admin import AdminClient

        self.config, self.where, self.error = dict(config), where, error
        self.admin = AdminClient({**self.config, "socket.timeout.ms": str(int(TIMEOUT_S * 1000))})

    def failed(self, doing: str, exc: BaseException) -> Exception:
        text = str(exc.args[0] if getattr(exc, "args", None) else exc)
        return self.error(f"{self.where}: {doing} failed: {text.splitlines()[0] if text else repr(exc)}")

    def result(self, future: Any, doing: str) -> Any:
        try:
            return future.result(timeout=TIMEOUT_S)
        except Exception as exc:  # KafkaException, a timeout: one line naming the cluster
            raise self.failed(doing, exc) from None

    def topic_names(self) -> set[str]:
        try:
            return set(self.admin.list_topics(timeout=TIMEOUT_S).topics)
        except Exception as exc:
            raise self.failed("listing topics", exc) from None

    def matching(self, pattern: str) -> list[str]:
        """The topics whose names match ``pattern`` whole (not Kafka's internal ``__`` ones)."""
        return sorted(t for t in self.topic_names() if re.fullmatch(pattern, t) and not t.startswith("__"))

    def describe(self, names: Iterable[str]) -> dict[str, tuple[str, int]]:
        """name -> (topic id, partitions)."""
        from confluent_kafka import TopicCollection

        names = list(names)
        if not names:
            return {}
        described = self.admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S)
        out = {}
        for name, future in described.items():
            d = self.result(future, f"describing topic {name}")
            out[name] = (str(d.topic_id), len(d.partitions))
        return out

    def create_topic(self, name: str, partitions: int = -1, **configs: str) -> None:
        """``name`` made with ``partitions`` (-1: the broker's default) and the broker's replication, unless
        it exists already."""
        from confluent_kafka import KafkaError
        from confluent_kafka.admin import NewTopic

        future = self.admin.create_topics([NewTopic(name, partitions, -1, config=dict(configs))],
                                          request_timeout=TIMEOUT_S)[name]
        try:
            future.result(timeout=TIMEOUT_S)
        except Exception as exc:
            if not (exc.args and getattr(exc.args[0], "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise self.failed(f"creating topic {name}", exc) from None

    def offsets(self, partitions: Iterable[tuple[str, int]], spec: str) -> dict[tuple[str, int], int]:
        """Each partition's ``earliest`` offset (the first retained) or ``latest`` stable one (read_committed:
        an open transaction holds it back)."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        wanted = {TopicPartition(t, p): getattr(OffsetSpec, spec)() for t, p in partitions}
        if not wanted:
            return {}
        futures = self.admin.list_offsets(wanted, isolation_level=IsolationLevel.READ_COMMITTED,
                                          request_timeout=TIMEOUT_S)
        return {(tp.topic, tp.partition): self.result(f, f"reading the {spec} offsets of {tp.topic}").offset
                for tp, f in futures.items()}

    def commit_group(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Consumer group ``group``'s committed offsets set to ``offsets``."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())])
        futures = self.admin.alter_consumer_group_offsets([request], request_timeout=TIMEOUT_S)
        for future in futures.values():
            self.result(future, f"committing the offsets of consumer group {group}")

    def read(self, ranges: Mapping[tuple[str, int], tuple[int, int]], reader: str) -> Iterator[Any]:
        """Every record a read_committed consumer sees in each partition's range [first, end), partition by
        partition in offset order (``reader`` names the consumer; it commits nothing). ``end`` is at most
        the partition's last stable offset: past it the read would wait for records to come."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        todo = {tp: rng for tp, rng in ranges.items() if rng[1] > rng[0]}
        if not todo:
            return
        consumer = Consumer({**self.config, "group.id": reader, "enable.auto.commit": False,
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
                            raise self.error(f"{self.where}: reading {tp[0]} partition {tp[1]} failed: "
                                             f"{msg.error().str()}")
                    elif tp in todo and msg.offset() < todo[tp][1]:
                        yield msg
                # past the range's last record: a commit marker or aborted records may end it, never read
                for tp in list(todo):
                    if consumer.position([TopicPartition(*tp)])[0].offset >= todo[tp][1]:
                        del todo[tp]
                if todo and time.monotonic() > deadline:
                    waiting = ", ".join(f"{t} partition {p}" for t, p in todo)
                    raise self.error(f"{self.where}: no record of {waiting} arrived for {TIMEOUT_S:.0f}s, "
                                     "before the end offset the broker gave")
        finally:
            consumer.close()
