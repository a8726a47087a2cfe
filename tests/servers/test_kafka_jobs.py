"""Jobs whose source is a Kafka broker (Apache Kafka 4 in KRaft mode, ``tests/servers/kafka.py``), every command
through the command line (spark-submit) with Spark's Kafka connector on ``spark.jars`` from a
``SPARK_CONF_DIR``, as a cluster's administrator gives it.

- tests/jobs/kafka_clicks.py (two topics of three partitions, a keyed aggregate and an event-time window,
  an id field): clicks produced in transactions while the job runs, a quarter of them aborted, a few
  resent under an id already sent; ``process`` SIGKILLed inside an epoch and ``recover``, then on: both
  sinks equal a plain-Python reference of the committed clicks below the cuts (no aborted click, no
  resend), ``verify`` exits 0, the consumer group's offsets are the last committed cut;
- retention deleting offsets of an epoch not yet processed: the run stops before Spark reads, naming the
  topic, the partitions and the offsets (``process`` exits 2 with that line), and commits nothing; a barrier
  whose new offsets are gone is refused alike.
"""

from __future__ import annotations

import pytest

from coordinator.dataflow.discovery import get_job
from coordinator.catalog.db import upgrade
from coordinator.errors import SourceError
from tests import kafka_data
from tests.helpers import JOBS_DIR, make_workspace
from tests.servers.kafka import KafkaBroker
from tests.servers.remote_runs import command, ok

pytestmark = [pytest.mark.spark]


@pytest.fixture
def kafka(tmp_path, monkeypatch) -> KafkaBroker:
    with kafka_data.click_topics(tmp_path, monkeypatch) as broker:
        yield broker


def workspace(tmp_path):
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    upgrade(catalog)
    return make_workspace(tmp_path, catalog, get_job("kafka_clicks"), jobs_dir=str(JOBS_DIR))


def cuts(ws) -> list[dict[str, int]]:
    """The cut of every barrier, in epoch order."""
    return [ws.store.cut(ws.job.name, c.checkpoint_id) for c in sorted(
        ws.store.checkpoints(ws.job.name), key=lambda c: c.checkpoint_id) if c.checkpoint_id <= _last(ws)]


def _last(ws) -> int:
    return ws.store.latest_completed(ws.job.name).checkpoint_id


def sinks(ws) -> tuple[dict, dict]:
    tables = {s.name: s.target(ws.settings.database_url).read().to_pylist() for s in ws.job.sinks
              if s.name in ("per_user_out", "per_minute_out")}
    per_user = {r["user"]: r["clicks"] for r in tables["per_user_out"]}
    windows = {(r["user"], r["window_start"]): r["clicks"] for r in tables["per_minute_out"]}
    return per_user, windows


@pytest.mark.heavy(seconds=170)
def test_two_topics_with_aborted_transactions_survive_a_kill(tmp_path, kafka, summary) -> None:
    ws = workspace(tmp_path)
    producer = kafka_data.ClickProducer(kafka)
    for _ in range(3):
        producer.transaction()
    ws.coordinator.inject()
    producer.start()  # records arrive while the job runs
    try:
        for _ in range(2):
            producer.transaction()
            ws.coordinator.inject()
        code, out = command(ws, "process", ws.job.name, faults="epoch.compute@3=kill")
        assert code == -9, out[-4000:]
        ok(ws, "recover", ws.job.name)
        ws.coordinator.inject()
        ok(ws, "process", ws.job.name)
    finally:
        producer.stop()
    ok(ws, "finalize", ws.job.name)
    assert _last(ws) == 4
    expected_users, expected_windows = kafka_data.reference(producer.sent, cuts(ws))
    per_user, windows = sinks(ws)
    assert per_user == dict(expected_users)
    assert windows == dict(expected_windows)
    assert len(expected_windows) >= 3
    assert "checkpoint 4 verified" in ok(ws, "verify", ws.job.name)
    # no aborted click and no resend reached a sink: the totals are the committed first sends below the cut
    cut = ws.store.cut(ws.job.name, 4)
    below = [s for s in producer.sent if s.offset < cut.get(kafka_data.partition_name(s.topic, s.partition), 0)]
    aborted = sum(not s.committed for s in below)
    assert aborted > 0
    assert sum(per_user.values()) == len({s.click["id"] for s in below if s.committed})
    # the consumer group follows the committed cut, for Kafka's lag tools
    assert kafka_data.group_offsets(kafka, "absreplay-kafka_clicks") == cut
    summary(f"kafka_clicks: 2 topics x 3 partitions, {len(below)} records below the cut ({aborted} of aborted "
            f"transactions, in none of the sinks), process SIGKILLed in epoch 3, recovered; sinks = reference, "
            f"verify 0")


@pytest.mark.heavy(seconds=30)
def test_offsets_deleted_by_retention_are_an_error_not_a_gap(tmp_path, kafka, spark, summary) -> None:
    ws = workspace(tmp_path)
    producer = kafka_data.ClickProducer(kafka, abort_every=10**9)
    for _ in range(2):
        producer.transaction()
    ws.coordinator.inject()
    cut = ws.store.cut(ws.job.name, 1)
    # retention takes the first records of two partitions before epoch 1 ran: the run stops before Spark reads
    kafka.delete_records("clicks-a", {0: cut["clicks-a-0"] - 1, 2: 2})
    with pytest.raises(SourceError) as refused:
        ws.run_epochs(spark)
    error = str(refused.value)
    assert "the offsets of epoch 1 of job 'kafka_clicks' are no longer on the broker (deleted by retention): " \
           "topic clicks-a partition(s) 0 (offsets 0.." in error, error
    assert ", 2 (offsets 0..1)" in error, error
    assert kafka.watermarks("clicks-a", 0)[0] == cut["clicks-a-0"] - 1
    assert ws.store.latest_completed(ws.job.name) is None
    # offsets after the last cut that are gone before any barrier read them: the barrier is refused
    producer.transaction()
    assert kafka.watermarks("clicks-b", 1)[1] > cut["clicks-b-1"]
    kafka.delete_records("clicks-b", {1: kafka.watermarks("clicks-b", 1)[1]})
    with pytest.raises(SourceError, match=r"offsets barrier 2 would register \(after the last cut\) are no longer on the broker .*topic clicks-b"):
        ws.coordinator.inject()
    assert [c.checkpoint_id for c in ws.store.checkpoints(ws.job.name)] == [1]
    summary(f"retention: {error[:200]}")
