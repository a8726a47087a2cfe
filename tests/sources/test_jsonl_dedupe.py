"""End to end on PostgreSQL with real Spark: `.jsonl` segments carry record ids; a producer
re-lands copies of earlier records (same ids) in new segments, mixed with new records.
After every cycle the sink equals an independent recount of the unique ids, and
dead_letters holds exactly the copies."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import text

from absreplay_examples.recount import recount, tokenize
from absreplay_examples.sample_data import land_jsonl_segment, land_segment, lines, vocabulary
from spark_jobs.verify import verify
from tests.helpers import make_workspace

pytestmark = pytest.mark.spark

T0 = 1_700_000_000


class Producer:
    """Lands segments and remembers every record's offset, so the test knows where each copy is."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.rng = random.Random(11)
        self.vocab = vocabulary(400)
        self.offsets: dict[str, int] = {}
        self.sent: list[dict] = []  # every record landed, originals only
        self.copies: set[tuple[str, int]] = set()  # (partition, offset) of every re-landed copy
        self.clock = T0

    def new_records(self, n: int, prefix: str) -> list[dict]:
        records = []
        for i, line in enumerate(lines(self.rng, self.vocab, n)):
            self.clock += self.rng.randint(0, 1)
            records.append({"id": f"{prefix}-{i}", "ts": self.clock, "line": line})
        return records

    def land(self, partition: str, name: str, records: list[dict], copies: int = 0, resend: list[dict] = ()) -> None:
        """Land ``records`` with ``copies`` random earlier records (and ``resend``) re-sent among them."""
        old = self.rng.sample(self.sent, copies) + list(resend)
        self.sent.extend(records)
        batch = [(r, False) for r in records] + [(dict(r), True) for r in old]
        self.rng.shuffle(batch)
        first = self.offsets.get(partition, 0)
        self.copies |= {(partition, first + i) for i, (_, copy) in enumerate(batch) if copy}
        land_jsonl_segment(self.ws.input_dir / partition, name, [r for r, _ in batch])
        self.offsets[partition] = first + len(batch)

    def land_text(self, partition: str, name: str, n: int) -> None:
        land_segment(self.ws.input_dir / partition, name, lines(self.rng, self.vocab, n))
        self.offsets[partition] = self.offsets.get(partition, 0) + n


def test_relanded_ids_are_counted_once(tmp_path, pg_url, spark) -> None:
    ws = make_workspace(tmp_path, pg_url)
    job = ws.job.name
    producer = Producer(ws)

    def barrier() -> None:
        assert ws.coordinator.inject().checkpoint_id is not None

    def process_and_check() -> None:
        report = ws.run_epochs(spark)
        assert report.epochs and not report.failed
        ws.coordinator.finalize()
        checkpoints = [c.checkpoint_id for c in ws.store.checkpoints(job)]
        cuts = [ws.store.cut(job, c) for c in checkpoints]
        assert ws.store.latest_completed(job).checkpoint_id == checkpoints[-1]
        assert ws.committed() == dict(recount(ws.input_dir, cuts[-1], cuts[:-1]))
        with ws.store.engine.connect() as c:
            dups = set(c.execute(text(
                "SELECT partition, \"offset\" FROM dead_letters WHERE reason LIKE 'duplicate id %'"
            )).all())
        assert dups == producer.copies

    # epoch 1: ids only, nothing to drop (the runner takes its plain line reader), and a text segment
    producer.land("p0", "seg-000001.jsonl", producer.new_records(500, "a"))
    producer.land("p1", "seg-000001.jsonl", producer.new_records(500, "b"))
    producer.land_text("p1", "seg-000001.txt", 100)
    barrier()
    process_and_check()
    assert producer.copies == set()

    # epoch 2: both partitions re-send earlier records (the other partition's too) among new ones
    producer.land("p0", "seg-000002.jsonl", producer.new_records(400, "c"), copies=150)
    producer.land("p1", "seg-000002.jsonl", producer.new_records(300, "d"), copies=80)
    barrier()
    process_and_check()

    # epochs 3 and 4 in one catch-up run: a segment of copies only; a copy landing twice at once
    producer.land("p0", "seg-000003.jsonl", [], copies=120)
    barrier()
    producer.land("p1", "seg-000003.jsonl", producer.new_records(300, "e"), copies=60)
    producer.land("p2", "seg-000001.jsonl", [], resend=[producer.sent[0], producer.sent[0]])
    barrier()
    process_and_check()

    with ws.store.engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM record_ids")).scalar_one() == len(producer.sent)
        first = c.execute(text("SELECT partition, \"offset\" FROM record_ids WHERE record_id = 'a-0'")).one()
        reasons = c.execute(text("SELECT reason FROM dead_letters WHERE partition = 'p2' ORDER BY \"offset\"")).all()
    assert [r for r, in reasons] == [f"duplicate id a-0: first seen at {first[0]}@{first[1]}"] * 2
    text_lines = (ws.input_dir / "p1" / "seg-000001.txt").read_text().splitlines()
    words = sum(len(tokenize(r["line"])) for r in producer.sent) + sum(len(tokenize(line)) for line in text_lines)
    assert sum(ws.committed().values()) == words
    assert verify(spark, ws.store, ws.job, ws.settings).equal
