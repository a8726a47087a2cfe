"""A Kafka topic as a sink target: a checkpoint's output published in one Kafka transaction, exactly once for
a ``read_committed`` consumer.

Each record is a JSON object of the sink's columns (timestamps as ISO-8601 strings); a keyed sink's records
carry their key (a JSON object of the key's columns) and a deleted key is a tombstone (a record with that key
and no value), so a compacted topic ends up with one record a key, as an upsert table would. An append
sink's records have no key.

The commit record: in the same transaction as the rows, a marker record goes to the commits topic
(``absreplay-commits`` unless the sink names another; one partition, compacted), keyed ``<job>/<sink>``, whose
value names the checkpoint. A read_committed reader of that topic sees the marker if and only if the rows
are visible, so ``committed_through`` is the newest marker of (job, sink). The producer's
``transactional.id`` is ``absreplay-<job>-<sink>``: ``init_transactions`` fences an earlier producer of the
same id (a ``finalize`` killed mid-commit, still alive somewhere) and aborts its open transaction, or waits
for the commit it had begun to complete; only then is the marker read. So a finalize killed at any step and
run again either finds the checkpoint's marker (and writes nothing) or publishes the checkpoint once.

A rewind cannot take records back from a topic. A keyed sink's revert publishes the checkpoint's rows again
and a tombstone for every other key the topic holds, so that a compacted topic, read to its end, holds the
checkpoint's rows; an append sink's revert publishes nothing, and the records of the later checkpoints stay
(a consumer sees the replayed epochs' records again). Either way the marker goes back to the checkpoint.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Collection, Iterable
from decimal import Decimal
from typing import Any

import pyarrow as pa

from coordinator import kafka_cluster
from coordinator.faults import fault_point
from coordinator.sinks.deletes import DELETE

#: where a sink's commit records go unless it names another topic
COMMITS_TOPIC = "absreplay-commits"
#: what a rewind of an append sink leaves in its topic
APPEND_REWIND = ("a Kafka topic is append-only: the records the later checkpoints published stay, and the "
                 "replayed epochs publish theirs again")


class KafkaError(OSError):
    """The cluster refused or did not answer: an I/O error, which the commit names (``SinkCommitError``)."""


def _json(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def encode(row: dict[str, Any], columns: Iterable[str]) -> bytes:
    return json.dumps({c: row[c] for c in columns}, default=_json, separators=(",", ":")).encode()


class KafkaTopic:
    def __init__(self, topic: str, servers: str, options: tuple[tuple[str, str], ...], schema: pa.Schema,
                 key: tuple[str, ...] | None, commits_topic: str = COMMITS_TOPIC) -> None:
        self.topic, self.servers, self.options = topic, servers, options
        self.schema, self.key, self.commits_topic = schema, key, commits_topic
        self.config = kafka_cluster.client_config(servers, options)
        self.cluster = kafka_cluster.Cluster(self.config, self.describe(), KafkaError)

    def describe(self) -> str:
        return f"Kafka topic {self.topic} at {self.servers}"

    def prepare(self) -> None:
        """The topic (the broker's default partitions) and the commits topic (one partition, compacted),
        made where missing."""
        names = self.cluster.topic_names()
        if self.topic not in names:
            self.cluster.create_topic(self.topic)
        if self.commits_topic not in names:
            self.cluster.create_topic(self.commits_topic, 1, **{"cleanup.policy": "compact"})

    def _marker_key(self, job: str, sink: str) -> bytes:
        return f"{job}/{sink}".encode()

    def committed_through(self, job: str, sink: str) -> int | None:
        """The checkpoint of (job, sink)'s newest marker a read_committed reader sees."""
        found = None
        key = self._marker_key(job, sink)
        for msg in self._read_all(self.commits_topic, f"absreplay-marks-{job}"):
            if msg.key() == key and msg.value() is not None:
                found = json.loads(msg.value())["checkpoint_id"]
        return found

    def _read_all(self, topic: str, reader: str) -> Iterable[Any]:
        """Every record of ``topic`` a read_committed consumer sees now."""
        _, partitions = self.cluster.describe([topic])[topic]
        tps = [(topic, p) for p in range(partitions)]
        earliest, latest = self.cluster.offsets(tps, "earliest"), self.cluster.offsets(tps, "latest")
        return self.cluster.read({tp: (earliest[tp], latest[tp]) for tp in tps}, reader)

    def _producer(self, job: str, sink: str, fault: str, checkpoint_id: int) -> Any:
        """The sink's transactional producer, every earlier one of its id fenced and settled."""
        from confluent_kafka import Producer

        # murmur2: a key goes to the partition a Java producer would send it to
        producer = Producer({**self.config, "transactional.id": f"absreplay-{job}-{sink}", "partitioner": "murmur2_random",
                             "enable.idempotence": True, "linger.ms": 20, "compression.type": "lz4"})
        try:
            producer.init_transactions(kafka_cluster.TIMEOUT_S)
        except Exception as exc:
            raise self.cluster.failed("starting the sink's transactions", exc) from None
        fault_point(f"{fault}.fenced", checkpoint_id)
        return producer

    def _publish(self, producer: Any, job: str, sink: str, checkpoint_id: int, records: Iterable[tuple[bytes | None, bytes | None]],
                 fault: str) -> int:
        """``records`` (key, value) and the marker of ``checkpoint_id`` in one transaction; returns the records."""
        n = 0
        try:
            producer.begin_transaction()
            for key, value in records:
                producer.produce(self.topic, value, key)
                n += 1
                if n % 10_000 == 0:
                    producer.poll(0)
            fault_point(f"{fault}.rows_sent", checkpoint_id)
            marker = {"job": job, "sink": sink, "checkpoint_id": checkpoint_id, "records": n}
            producer.produce(self.commits_topic, json.dumps(marker).encode(), self._marker_key(job, sink))
            producer.flush(kafka_cluster.TIMEOUT_S)
            fault_point(f"{fault}.before_commit", checkpoint_id)
            producer.commit_transaction(kafka_cluster.TIMEOUT_S)
        except Exception as exc:
            if isinstance(exc, KafkaError):
                raise
            raise self.cluster.failed(f"publishing checkpoint {checkpoint_id}", exc) from None
        fault_point(f"{fault}.after_commit", checkpoint_id)
        return n

    def _records(self, rows: pa.Table) -> Iterable[tuple[bytes | None, bytes | None]]:
        columns = self.schema.names
        deleted = DELETE in rows.column_names
        for row in rows.to_pylist():
            key = encode(row, self.key) if self.key is not None else None
            yield key, None if deleted and row[DELETE] else encode(row, columns)

    def commit(self, job: str, sink: str, checkpoint_id: int, rows: pa.Table) -> bool:
        # first: a transaction an earlier attempt began is aborted, or its commit complete, after it
        producer = self._producer(job, sink, "kafka_sink", checkpoint_id)
        done = self.committed_through(job, sink)
        if done is not None and done >= checkpoint_id:
            return False
        self._publish(producer, job, sink, checkpoint_id, self._records(rows), "kafka_sink")
        return True

    def revert(self, job: str, sink: str, checkpoint_id: int, rows: pa.Table, later: Collection[int]) -> int:
        producer = self._producer(job, sink, "kafka_sink", checkpoint_id)
        if self.key is None:  # APPEND_REWIND: only the marker goes back
            self._publish(producer, job, sink, checkpoint_id, (), "kafka_sink")
            return 0
        kept = {encode(r, self.key) for r in rows.to_pylist()}
        stale = {m.key() for m in self._read_all(self.topic, f"absreplay-revert-{job}")
                 if m.key() is not None and m.value() is not None} - kept
        tombstones = ((key, None) for key in sorted(stale))
        records = list(self._records(rows)) + list(tombstones)
        return self._publish(producer, job, sink, checkpoint_id, records, "kafka_sink")

    def read(self) -> pa.Table:
        """What a read_committed consumer reads: a keyed sink's latest record a key (tombstoned keys left
        out), an append sink's every record."""
        latest: dict[bytes | None, Any] = {}
        rows = []
        for msg in self._read_all(self.topic, "absreplay-read"):
            if self.key is None:
                rows.append(json.loads(msg.value()))
            else:
                latest[msg.key()] = msg.value()
        if self.key is not None:
            rows = [json.loads(v) for v in latest.values() if v is not None]
        return pa.Table.from_pylist(rows, schema=pa.schema([pa.field(f.name, _read_type(f.type)) for f in self.schema]))


def _read_type(t: pa.DataType) -> pa.DataType:
    """The type a column reads back as from JSON: timestamps and dates as their ISO-8601 text."""
    return pa.string() if pa.types.is_timestamp(t) or pa.types.is_date(t) else t
