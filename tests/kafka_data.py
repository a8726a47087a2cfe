"""Clicks produced to Kafka for the Kafka tests, and the reference their sinks are judged against.

``ClickProducer`` produces clicks in transactions (of several partitions of both topics), aborting every
``abort_every``-th one, and resends a few clicks under an id already sent (to the same partition, later):
it remembers where each record went and whether its transaction committed. The reference counts the
committed clicks below each checkpoint's cut, epoch by epoch, in plain Python (``tests.window_reference``
for the windows): nothing of it comes from Spark.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import JOBS_DIR
from tests.servers.jvm_deps import classpath
from tests.servers.kafka import KafkaBroker, kafka_broker
from tests.window_reference import tumbling

TOPICS = ("clicks-a", "clicks-b")
PARTITIONS = 3
USERS = 12
START_MS = 1_700_000_000_000


@contextmanager
def click_topics(folder: Path, monkeypatch) -> Iterator[KafkaBroker]:
    """A broker with the two click topics for tests/jobs/kafka_clicks.py (``KAFKA_BOOTSTRAP``, ``ABS_JOBS_DIR``),
    and Spark's Kafka connector on ``spark.jars`` of a ``SPARK_CONF_DIR``, as a cluster's administrator gives it."""
    with kafka_broker(folder / "kafka") as broker:
        monkeypatch.setenv("KAFKA_BOOTSTRAP", broker.bootstrap)
        monkeypatch.setenv("ABS_JOBS_DIR", str(JOBS_DIR))
        conf = folder / "spark-conf"
        conf.mkdir()
        (conf / "spark-defaults.conf").write_text(f"spark.jars {classpath('spark').replace(':', ',')}\n")
        monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
        for topic in TOPICS:
            broker.create_topic(topic, partitions=PARTITIONS)
        yield broker


@dataclass
class Sent:
    topic: str
    partition: int
    offset: int
    click: dict
    committed: bool


@dataclass
class ClickProducer:
    broker: object
    abort_every: int = 4
    per_transaction: int = 30
    sent: list[Sent] = field(default_factory=list)
    _n: int = 0
    _transactions: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    #: one transaction at a time, whether the test's thread or the background one produces it
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.producer = self.broker.transactional_producer("tests-clicks")

    def transaction(self) -> None:
        """One transaction of ``per_transaction`` clicks over every partition; every ``abort_every``-th aborted."""
        with self._lock:
            self._transaction()

    def _transaction(self) -> None:
        self._transactions += 1
        commit = self._transactions % self.abort_every != 0
        pending: list[tuple[dict, list]] = []
        self.producer.begin_transaction()
        for _ in range(self.per_transaction):
            self._n += 1
            user = f"u{self._n % USERS}"
            # ids repeat now and then: a resend of a click sent a moment ago, to its partition
            cid = f"c{self._n - 7}" if self._n % 23 == 0 and self._n > 7 else f"c{self._n}"
            click = {"id": cid, "ts": START_MS + self._n * 400, "user": user}
            number = int(cid[1:])
            topic, partition = TOPICS[number % 2], (number // 2) % PARTITIONS
            where: list = []
            self.producer.produce(topic, json.dumps(click).encode(), partition=partition,
                                  on_delivery=lambda err, msg, where=where: where.append(msg))
            pending.append((click, where))
        self.producer.flush(30)
        if commit:
            self.producer.commit_transaction(30)
        else:
            self.producer.abort_transaction(30)
        for click, where in pending:
            msg = where[0]
            self.sent.append(Sent(msg.topic(), msg.partition(), msg.offset(), click, commit))

    def start(self, pause_s: float = 0.3) -> None:
        """Produce transactions in the background until ``stop``."""
        def loop() -> None:
            while not self._stop.is_set():
                self.transaction()
                time.sleep(pause_s)

        self._stop.clear()
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    @property
    def aborted_ids(self) -> set[str]:
        return {s.click["id"] for s in self.sent if not s.committed}


def group_offsets(broker: KafkaBroker, group: str) -> dict[str, int]:
    """The consumer group's committed offsets, by partition name."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    found = broker.admin().list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    return {partition_name(tp.topic, tp.partition): tp.offset for tp in found[group].result().topic_partitions}


def partition_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def epochs(sent: list[Sent], cuts: list[dict[str, int]]) -> list[list[dict]]:
    """The committed clicks of each epoch (between consecutive ``cuts``), each epoch in offset order per
    partition, duplicates of an id already seen (in arrival order) dropped as the id store drops them."""
    seen: set[str] = set()
    out, before = [], {}
    for cut in cuts:
        batch = []
        for s in sorted(sent, key=lambda s: (s.topic, s.partition, s.offset)):
            p = partition_name(s.topic, s.partition)
            if s.committed and before.get(p, 0) <= s.offset < cut.get(p, 0) and s.click["id"] not in seen:
                seen.add(s.click["id"])
                batch.append(s.click)
        out.append(batch)
        before = cut
    return out


def reference(sent: list[Sent], cuts: list[dict[str, int]]) -> tuple[Counter, Counter]:
    """(clicks per user, clicks per (user, minute start) of the windows emitted) after the epochs of ``cuts``."""
    batches = epochs(sent, cuts)
    per_user = Counter(c["user"] for batch in batches for c in batch)
    windows, _late = tumbling([b for b in batches if b], 60_000, 30_000, "ts")
    return per_user, windows
