"""A Kafka broker for the tests: Apache Kafka 4 in KRaft mode (one process as broker and controller), from
Maven Central through ``jvm/pom.xml``'s ``kafka`` profile, on free loopback ports, its log under the test's
folder.

    with kafka_broker(tmp_path / "kafka") as kafka:
        kafka.create_topic("clicks", partitions=3)
        kafka.producer().produce("clicks", b"...")

Its internal topics (consumer offsets, transactions) have one replica and one partition each, so the first
transaction and the first group commit do not wait for fifty partitions to be made. It runs in a process
group of its own and is stopped by group, even after a failure.
"""

from __future__ import annotations

import base64
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from absreplay.commands.process_group import stop_process_group
from absreplay.commands.standalone_cluster import free_port
from tests.servers.jvm_deps import classpath

READY_TIMEOUT_S = 90

LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss.SSS}} %-5level %logger{{1}} - %msg%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""


@dataclass
class KafkaBroker:
    bootstrap: str
    _admin: AdminClient | None = field(default=None, repr=False)

    def admin(self) -> AdminClient:
        """One admin client for the broker's life: a client that is collected fails the requests it had made."""
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def create_topic(self, name: str, partitions: int = 1, **configs: str) -> None:
        futures = self.admin().create_topics([NewTopic(name, partitions, 1, config=dict(configs))])
        futures[name].result(timeout=30)
        # the topic's partitions have their leader once their metadata says so
        deadline = time.monotonic() + 30
        while True:
            meta = self.admin().list_topics(name, timeout=10).topics[name]
            if meta.error is None and len(meta.partitions) == partitions and all(
                    p.leader >= 0 for p in meta.partitions.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name} has no leader after 30 s")
            time.sleep(0.1)

    def producer(self, **conf: object) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, **conf})

    def transactional_producer(self, transactional_id: str) -> Producer:
        producer = self.producer(**{"transactional.id": transactional_id})
        producer.init_transactions(30)
        return producer

    def read_committed(self, topic: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
        """Every record of ``topic`` a read_committed consumer sees, from each partition's first retained offset
        to its end (its last stable offset): (partition, offset, key, value)."""
        partitions = sorted(self.admin().list_topics(topic, timeout=10).topics[topic].partitions)
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"tests-{uuid.uuid4()}",
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "enable.partition.eof": True})
        try:
            # from the beginning, not offset 0: once records are deleted, 0 is out of range and the consumer
            # would reset to the end
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            records, todo = [], {p for p in partitions}
            deadline = time.monotonic() + 60
            while todo:
                for msg in consumer.consume(1000, 0.5):
                    if msg.error() is None:
                        records.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
                    elif msg.error().code() == KafkaError._PARTITION_EOF:
                        todo.discard(msg.partition())
                    else:
                        raise KafkaException(msg.error())
                if time.monotonic() > deadline:
                    raise RuntimeError(f"reading {topic}: partitions {sorted(todo)} never reached their end")
            return sorted(records)
        finally:
            consumer.close()

    def delete_records(self, topic: str, before: dict[int, int]) -> None:
        """Offsets below ``before[p]`` of each partition deleted, as retention deletes old segments."""
        futures = self.admin().delete_records([TopicPartition(topic, p, o) for p, o in before.items()])
        for future in futures.values():
            future.result(timeout=30)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """The partition's first retained offset and its end (high watermark)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "tests-watermarks"})
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        finally:
            consumer.close()


@contextmanager
def kafka_broker(base: Path) -> Iterator[KafkaBroker]:
    """One KRaft node on free loopback ports, its data and log under ``base``; stopped on exit."""
    base.mkdir(parents=True, exist_ok=True)
    port, controller = free_port(), free_port()
    properties = base / "server.properties"
    properties.write_text("\n".join([
        "process.roles=broker,controller", "node.id=1",
        f"controller.quorum.bootstrap.servers=127.0.0.1:{controller}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        f"log.dirs={base / 'data'}",
        "num.partitions=1", "auto.create.topics.enable=false",
        "offsets.topic.replication.factor=1", "offsets.topic.num.partitions=1",
        "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
        "transaction.state.log.num.partitions=1", "share.coordinator.state.topic.replication.factor=1",
        "group.initial.rebalance.delay.ms=0", "log.retention.check.interval.ms=1000", ""]))
    log = base / "kafka.log"
    logging = base / "log4j2.properties"
    logging.write_text(LOG4J2.format(log=log))
    # the client compiler alone and the serial collector, as the tests' other JVMs: the broker is up sooner
    java = ["java", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={logging}",
            "-cp", classpath("kafka")]
    # a cluster id is 16 random bytes in unpadded URL-safe base64, as Kafka's own Uuid prints them; one that
    # starts with "-" would be read as an option by the tool's argument parser (Kafka's Uuid.randomUuid
    # draws again for the same reason)
    cluster_id = "-"
    while cluster_id.startswith("-"):
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    formatted = subprocess.run([*java, "kafka.tools.StorageTool", "format", "--config", str(properties),
                                "--cluster-id", cluster_id, "--standalone"], capture_output=True, text=True)
    if formatted.returncode != 0:
        raise RuntimeError(f"formatting Kafka's storage failed: {(formatted.stdout + formatted.stderr)[-2000:]}")
    output = base / "kafka.out"  # the JVM's own errors (a class missing, say); the broker's are in its log

    def tail() -> str:
        return "\n".join(f.read_text()[-2000:] for f in (output, log) if f.exists())

    with output.open("wb") as out:
        proc = subprocess.Popen([*java, "kafka.Kafka", str(properties)], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    broker = KafkaBroker(f"127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"Kafka exited with {proc.returncode}: {tail()}")
            try:  # the port first: a client polling a closed port logs every attempt
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                broker.admin().list_topics(timeout=5)
                break
            except (OSError, KafkaException):
                time.sleep(0.1)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Kafka did not answer on {port} in {READY_TIMEOUT_S} s: {tail()}") from None
        yield broker
    finally:
        broker._admin = None  # gone with the broker: it would log every attempt to reconnect to it
        stop_process_group(proc)
