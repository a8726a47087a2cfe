"""The Kafka sink (``coordinator.sinks.kafka_topic``) against a real broker (``tests/servers/kafka.py``): a job
(tests/jobs/kafka_word_counts.py) appends every word to one topic and upserts a count per word into another;
its epochs run in this process, and ``absreplay finalize`` is SIGKILLed at every step of a Kafka commit in
turn (the producer fenced, the rows sent, the marker flushed before the commit, the transaction committed
before the catalog knew), then run to its end: a read_committed consumer reads every word once and each
word's latest count equal to a recount, and the commits topic holds one marker a checkpoint. Then a rewind
to checkpoint 1: the counts topic gets checkpoint 1's counts again and tombstones for the words epoch 2
brought, then the replay's counts; the words topic keeps what it had and gets epoch 2's words again.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from coordinator.dataflow.discovery import get_job
from absreplay_examples.recount import recount
from coordinator.catalog.db import upgrade
from tests.helpers import JOBS_DIR, make_workspace
from tests.servers.kafka import KafkaBroker, kafka_broker
from tests.servers.remote_runs import command, ok

STEPS = ("kafka_sink.fenced", "kafka_sink.rows_sent", "kafka_sink.before_commit", "kafka_sink.after_commit")


@pytest.fixture
def kafka(tmp_path, monkeypatch) -> KafkaBroker:
    with kafka_broker(tmp_path / "kafka") as broker:
        monkeypatch.setenv("KAFKA_BOOTSTRAP", broker.bootstrap)
        monkeypatch.setenv("ABS_JOBS_DIR", str(JOBS_DIR))
        yield broker


@pytest.mark.heavy(seconds=60)
def test_a_finalize_killed_at_every_step_publishes_each_checkpoint_once(tmp_path, kafka, spark, summary) -> None:
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    upgrade(catalog)
    ws = make_workspace(tmp_path, catalog, get_job("kafka_word_counts"), jobs_dir=str(JOBS_DIR))
    for batch in range(2):
        ws.land(batch, lines=200, vocab=100 + 200 * batch)  # epoch 2 brings words of its own
        ws.coordinator.inject()
    ws.run_epochs(spark)
    for step in STEPS:
        code, out = command(ws, "finalize", ws.job.name, faults=f"{step}=kill")
        assert code == -9 and f"fault point {step}" in out, out[-3000:]
    assert "committed 1,1,2,2;" in ok(ws, "finalize", ws.job.name)  # a transaction a sink and checkpoint

    expected = recount(ws.input_dir, ws.store.cut(ws.job.name, 2))
    counts = {word: values[-1] for word, values in count_history(kafka).items()}
    assert counts == dict(expected)
    words = Counter(json.loads(value)["word"] for _, _, _, value in kafka.read_committed("words"))
    assert words == expected
    markers = [json.loads(v) for _, _, _, v in kafka.read_committed("absreplay-commits")]
    assert sorted((m["sink"], m["checkpoint_id"]) for m in markers) == [
        ("counts_out", 1), ("counts_out", 2), ("words_out", 1), ("words_out", 2)]
    # the target reads what a consumer reads
    sink = next(s for s in ws.job.sinks if s.name == "counts_out")
    assert {r["word"]: r["count"] for r in sink.target(catalog).read().to_pylist()} == counts

    # a rewind to checkpoint 1 and its replay of epoch 2: the keyed topic got checkpoint 1's counts again and a
    # tombstone for each word of epoch 2 alone, then the replay's counts; the append topic took nothing back
    first = recount(ws.input_dir, ws.store.cut(ws.job.name, 1))
    assert set(expected) - set(first)
    out = ok(ws, "rewind", ws.job.name, "--to", "1")
    assert "note: sink words_out is a Kafka topic, which a rewind cannot take records back from" in out, out[-3000:]
    assert "note: sink counts_out is a Kafka topic" in out and "tombstones" in out
    history = count_history(kafka)
    assert {word: values[-2] for word, values in history.items()} == {word: first.get(word) for word in expected}
    assert {word: values[-1] for word, values in history.items()} == dict(expected)
    again = Counter(json.loads(value)["word"] for _, _, _, value in kafka.read_committed("words"))
    assert again == expected + (expected - first)
    summary(f"Kafka sink: finalize SIGKILLed at {len(STEPS)} steps of a commit in turn; {sum(words.values()):,} "
            f"words and {len(counts):,} counts read back once each, 4 markers; a rewind republished checkpoint "
            f"1's counts with {len(set(expected) - set(first))} tombstones, then the replay's")


def count_history(kafka: KafkaBroker) -> dict[str, list[int | None]]:
    """Every count the compacted counts topic holds for each word, in the order a consumer reads them (a
    word's records share a partition); None for a tombstone."""
    history: dict[str, list[int | None]] = {}
    for _, _, key, value in kafka.read_committed("word-counts"):
        history.setdefault(json.loads(key)["word"], []).append(None if value is None else json.loads(value)["count"])
    return history
