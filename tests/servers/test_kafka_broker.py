"""The tests' Kafka broker (``tests/servers/kafka.py``) itself: a topic of two partitions, one committed and one
aborted transaction, of which a read_committed reader sees the committed records alone, and records deleted
below an offset (what the Kafka tests use for retention) moving the partition's first offset.
"""

from __future__ import annotations

import pytest

from tests.servers.kafka import kafka_broker


@pytest.mark.heavy(seconds=15)
def test_a_broker_hides_aborted_transactions_and_deletes_records(tmp_path) -> None:
    with kafka_broker(tmp_path / "kafka") as kafka:
        kafka.create_topic("events", partitions=2)
        producer = kafka.transactional_producer("tests-events")
        producer.begin_transaction()
        for i, partition in enumerate([0, 1, 0]):
            producer.produce("events", f"committed-{i}".encode(), key=b"k", partition=partition)
        producer.commit_transaction(30)
        producer.begin_transaction()
        for i, partition in enumerate([0, 1]):
            producer.produce("events", f"aborted-{i}".encode(), partition=partition)
        producer.flush(30)  # on the broker: an abort purges what the producer has not sent yet
        producer.abort_transaction(30)

        records = kafka.read_committed("events")
        assert records == [(0, 0, b"k", b"committed-0"), (0, 1, b"k", b"committed-2"), (1, 0, b"k", b"committed-1")]
        # each partition's end is past its commit marker, the aborted records and the abort marker
        assert kafka.watermarks("events", 0) == (0, 5)

        kafka.delete_records("events", {0: 1})
        assert kafka.watermarks("events", 0) == (1, 5)
        assert kafka.read_committed("events") == records[1:]
