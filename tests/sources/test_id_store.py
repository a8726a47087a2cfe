"""The record-id store: a Bloom filter per event-time window in front of the exact ids, with
watermark garbage collection. The store tests run on SQLite and on PostgreSQL (``catalog_url``)."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select, text

from absreplay_examples.recount import kept_records
from absreplay_examples.sample_data import land_jsonl_segment, land_segment
from coordinator.catalog.db import make_engine
from coordinator.catalog.models import IdFilter, RecordId
from coordinator.errors import AbsError
from coordinator.sources.id_filter import WindowFilter, is_legacy
from coordinator.sources.id_store import Arrival, IdStore, IdStorePolicy, Verdict
from absreplay_examples.definitions import wordcount
from coordinator.checkpoints.store import CheckpointStore
from tests.helpers import make_workspace
from tests.segment_files import land

JOB = "wordcount"


# -- the Bloom filter --------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(st.text(min_size=1, max_size=30), max_size=300),
    expected=st.integers(1, 400),
    rate=st.floats(0.0001, 0.5),
)
def test_bloom_filter_has_no_false_negatives(items: list[str], expected: int, rate: float) -> None:
    bloom = WindowFilter.sized(expected, rate)
    for item in items:
        bloom.add(item)
    restored = WindowFilter.from_bytes(bloom.to_bytes())
    assert all(item in bloom for item in items)
    assert all(item in restored for item in items)
    assert restored.capacity == bloom.capacity == max(1, expected)


def test_bloom_filter_is_sized_for_its_design_rate() -> None:
    bloom = WindowFilter.sized(10_000, 0.01)
    # m = -n ln p / ln(2)^2 = 95,851 bits, in whole bytes
    assert bloom.bloom.size_in_bits == 95_856 and bloom.capacity == 10_000
    for i in range(10_000):
        bloom.add(f"in-{i}")
    false_positives = sum(f"out-{i}" in bloom for i in range(50_000))
    assert false_positives / 50_000 < 0.015


SAVED_IN_ANOTHER_PROCESS = """
import sys
from coordinator.sources.id_filter import WindowFilter
bloom = WindowFilter.sized(1000, 0.01)
for i in range(100):
    bloom.add(f"id-{i}")
sys.stdout.write(bloom.to_bytes().hex())
"""


def test_a_filter_saved_by_another_process_answers_the_same() -> None:
    """The hash is stable across processes (Python's ``hash`` of a str is salted per process)."""
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    saved = subprocess.run([sys.executable, "-c", SAVED_IN_ANOTHER_PROCESS], env=env, check=True,
                           capture_output=True, text=True).stdout
    restored = WindowFilter.from_bytes(bytes.fromhex(saved))
    assert all(f"id-{i}" in restored for i in range(100))
    assert sum(f"other-{i}" in restored for i in range(1000)) < 50


# -- the store ------------------------------------------------------------------
@pytest.fixture
def store(catalog_url: str) -> CheckpointStore:
    store = CheckpointStore(make_engine(catalog_url))
    store.register_job(wordcount())
    return store


def arrivals(checkpoint_id: int, partition: str, first_offset: int, *records: tuple[str, int]) -> list[Arrival]:
    return [Arrival(rid, ts, partition, first_offset + i, checkpoint_id) for i, (rid, ts) in enumerate(records)]


def admit(store: CheckpointStore, batch: list[Arrival], policy: IdStorePolicy | None = None, gc: bool = True):
    with store.sessions.begin() as s:
        ids = IdStore(s, JOB, policy)
        rejected = ids.admit(batch)
        collected = ids.gc() if gc else (0, 0)
    return rejected, ids.counters, collected


def stored_ids(store: CheckpointStore) -> dict[str, tuple[int, str, int]]:
    with store.sessions() as s:
        rows = s.execute(select(RecordId.record_id, RecordId.window_start, RecordId.partition, RecordId.offset)).all()
    return {rid: (w, p, o) for rid, w, p, o in rows}


def test_duplicates_across_batches_and_within_a_batch(store) -> None:
    rejected, c, _ = admit(store, arrivals(1, "p0", 0, ("a", 10), ("b", 20), ("c", 30), ("a", 10)))
    assert [(r.arrival.offset, r.verdict, r.reason) for r in rejected] == [
        (3, Verdict.DUPLICATE, "duplicate id a: first seen at p0@0")
    ]
    assert (c.admitted, c.bloom_negatives, c.exact_lookups, c.duplicates, c.batch_duplicates) == (3, 3, 0, 1, 1)

    # a re-landed copy of b (another partition, new offset), a new id twice, and c with another event time
    batch = arrivals(2, "p1", 0, ("b", 20), ("d", 40), ("d", 40), ("c", 3700))
    rejected, c, _ = admit(store, batch)
    assert [(r.arrival.partition, r.arrival.offset, r.reason) for r in rejected] == [
        ("p1", 0, "duplicate id b: first seen at p0@1"),
        ("p1", 2, "duplicate id d: first seen at p1@1"),
        # another window's filter cannot know c: the primary key of record_ids catches it
        ("p1", 3, "duplicate id c: first seen at p0@2"),
    ]
    assert (c.admitted, c.duplicates, c.batch_duplicates, c.reused_ids) == (1, 3, 1, 1)
    assert c.bloom_positives == 1 and c.lookup_queries == 2  # b looked up once; c after its insert was refused
    assert stored_ids(store) == {"a": (0, "p0", 0), "b": (0, "p0", 1), "c": (0, "p0", 2), "d": (0, "p1", 1)}


def test_a_repeat_of_a_stored_duplicate_names_the_stored_record(store) -> None:
    admit(store, arrivals(1, "p0", 0, ("a", 10)))
    rejected, _, _ = admit(store, arrivals(2, "p0", 1, ("a", 10), ("a", 10)))
    assert [r.reason for r in rejected] == ["duplicate id a: first seen at p0@0"] * 2


def test_false_positives_are_resolved_by_the_exact_lookup(store) -> None:
    # 152 bits and one hash per window: with 200 ids in it, it says "maybe" to most new ids
    tiny = IdStorePolicy(expected_ids_per_window=100, false_positive_rate=0.5)
    first = [(f"id-{i}", i) for i in range(200)]
    rejected, c, _ = admit(store, arrivals(1, "p0", 0, *first), tiny)
    assert rejected == [] and c.admitted == 200 and c.bloom_negatives == 200  # the filter starts empty

    second = [(f"new-{i}", 1000 + i) for i in range(200)]
    rejected, c, _ = admit(store, arrivals(2, "p0", 200, *second, ("id-5", 5)), tiny)
    assert [r.reason for r in rejected] == ["duplicate id id-5: first seen at p0@5"]
    assert c.admitted == 200 and c.false_positives >= 100 and c.filters_rebuilt == 0
    assert c.exact_lookups == c.bloom_positives == c.false_positives + 1
    assert c.lookup_queries == 1  # batched, not one query per record
    assert len(stored_ids(store)) == 400

    # the overfull filter is rebuilt from the window's exact ids, large enough to answer "no" again
    rejected, c, _ = admit(store, arrivals(3, "p0", 401, *[(f"more-{i}", 2000 + i) for i in range(200)]), tiny)
    assert rejected == [] and c.filters_rebuilt == 1 and c.false_positives < 100
    with store.sessions() as s:
        assert s.scalar(select(IdFilter.items).where(IdFilter.window_start == 0)) == 600


def legacy_filter(ids: list[str], expected_items: int, false_positive_rate: float) -> bytes:
    """A filter as the hand-written Bloom filter kept it, before rbloom: one byte k, then m bits set by
    BLAKE2b-128 double hashing (position i of an item: (h1 + i * h2) mod m)."""
    n = max(1, expected_items)
    m = max(8, math.ceil(-n * math.log(false_positive_rate) / math.log(2) ** 2))
    k = min(255, max(1, round(m / n * math.log(2))))
    bits = bytearray((m + 7) // 8)
    m = len(bits) * 8
    for rid in ids:
        digest = hashlib.blake2b(rid.encode("utf-8"), digest_size=16).digest()
        h1, h2 = int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little") | 1
        for i in range(k):
            p = (h1 + i * h2) % m
            bits[p >> 3] |= 1 << (p & 7)
    return bytes([k]) + bytes(bits)


def test_a_filter_kept_in_the_hand_written_format_is_rebuilt_and_still_finds_its_ids(store) -> None:
    policy = IdStorePolicy(expected_ids_per_window=1000)
    ids = [f"old-{i}" for i in range(50)]
    admit(store, arrivals(1, "p0", 0, *[(rid, i) for i, rid in enumerate(ids)]), policy)
    with store.sessions.begin() as s:  # the window's filter as an earlier version wrote it
        s.execute(IdFilter.__table__.update().where(IdFilter.window_start == 0)
                  .values(bits=legacy_filter(ids, 1000, policy.false_positive_rate)))
    assert is_legacy(legacy_filter(ids, 1000, policy.false_positive_rate))

    copies = [(ids[i], i) for i in range(0, 50, 5)]
    rejected, c, _ = admit(store, arrivals(2, "p1", 0, *copies, *[(f"new-{i}", 100 + i) for i in range(10)]), policy)
    assert [r.reason for r in rejected] == [f"duplicate id old-{i}: first seen at p0@{i}" for i in range(0, 50, 5)]
    assert c.filters_migrated == 1 and c.filters_rebuilt == 0 and c.admitted == 10
    # found by the rebuilt filter and the exact lookup, not by the primary key refusing the insert
    assert c.bloom_positives >= 10 and c.reused_ids == 0
    with store.sessions() as s:
        bits, items = s.execute(select(IdFilter.bits, IdFilter.items).where(IdFilter.window_start == 0)).one()
    assert not is_legacy(bits) and items == 60
    assert all(rid in WindowFilter.from_bytes(bits) for rid in [*ids, *(f"new-{i}" for i in range(10))])

    rejected, c, _ = admit(store, arrivals(3, "p0", 50, ("new-3", 103)), policy)
    assert [r.reason for r in rejected] == ["duplicate id new-3: first seen at p1@13"] and c.filters_migrated == 0


def test_gc_by_watermark_and_late_records(store) -> None:
    policy = IdStorePolicy(window_seconds=100, allowed_lateness_seconds=50)
    _, _, collected = admit(store, arrivals(1, "p0", 0, ("w0", 10), ("w1", 120), ("w2", 250)), policy)
    # watermark 250 - 50 = 200: windows [0, 100) and [100, 200) ended at or below it
    assert collected == (2, 2)
    assert stored_ids(store) == {"w2": (200, "p0", 2)}
    with store.sessions() as s:
        assert IdStore(s, JOB, policy).watermark() == (200, 250)

    batch = arrivals(2, "p0", 3, ("w0", 10), ("x", 199), ("y", 200), ("w2", 250), ("z", 420))
    rejected, c, collected = admit(store, batch, policy)
    assert [(r.arrival.record_id, r.verdict) for r in rejected] == [
        ("w0", Verdict.LATE), ("x", Verdict.LATE), ("w2", Verdict.DUPLICATE)
    ]
    assert rejected[1].reason == (
        "late: event time 199 is in window [100, 200) which ended at or below the watermark 200; its ids were collected"
    )
    assert (c.late, c.duplicates, c.admitted) == (2, 1, 2)
    # watermark 420 - 50 = 370: y's and w2's window [200, 300) is collected now, z's [400, 500) is not
    assert collected == (2, 1) and stored_ids(store) == {"z": (400, "p0", 7)}

    # more lateness later never moves the watermark back: collected windows stay collected
    patient = IdStorePolicy(window_seconds=100, allowed_lateness_seconds=10_000)
    rejected, _, _ = admit(store, arrivals(3, "p0", 8, ("old", 250)), patient)
    assert [r.verdict for r in rejected] == [Verdict.LATE]
    with store.sessions() as s:
        assert IdStore(s, JOB, patient).watermark() == (370, 420)


def test_ids_roll_back_with_the_inject_transaction(tmp_path, catalog_url, monkeypatch) -> None:
    ws = make_workspace(tmp_path, catalog_url)
    land_jsonl_segment(ws.input_dir / "p0", "seg-000001.jsonl", [{"id": "a", "ts": 1, "line": "x"}])
    monkeypatch.setenv("ABS_FAULTS", "inject.after_cut=raise")
    with pytest.raises(AbsError):
        ws.coordinator.inject()
    assert stored_ids(ws.store) == {}
    monkeypatch.delenv("ABS_FAULTS")
    assert ws.coordinator.inject().cut == {"p0": 1}
    assert stored_ids(ws.store) == {"a": (0, "p0", 0)}


def test_inject_dead_letters_duplicates_late_and_bad_records(tmp_path, catalog_url) -> None:
    job = dataclasses.replace(wordcount(), id_store=IdStorePolicy(window_seconds=60, allowed_lateness_seconds=0))
    ws = make_workspace(tmp_path, catalog_url, job)
    p0, p1 = ws.input_dir / "p0", ws.input_dir / "p1"
    land_jsonl_segment(p0, "seg-000001.jsonl", [
        {"id": "a", "ts": 100, "line": "alpha"}, {"id": "b", "ts": 110, "line": "beta"}
    ])
    land_segment(p1, "seg-000001.txt", ["plain text is not deduplicated", "plain text is not deduplicated"])
    ws.coordinator.inject()
    # p0 re-lands a; p1 switches to ids, repeats itself and sends a record for a collected window
    land_jsonl_segment(p0, "seg-000002.jsonl", [{"id": "c", "ts": 130, "line": "gamma"}, {"id": "a", "ts": 100, "line": "alpha"}])
    (p1 / "seg-000002.jsonl").write_text(
        '{"id": "d", "ts": 125, "line": "delta"}\n{"id": "d", "ts": 125, "line": "delta"}\n'
        '{"id": "e", "ts": 50, "line": "late"}\n{broken\n'
    )
    assert ws.coordinator.inject().cut == {"p0": 4, "p1": 6}
    with ws.store.engine.connect() as c:
        dead = c.execute(text(
            'SELECT checkpoint_id, partition, segment, "offset", reason, payload FROM dead_letters ORDER BY partition, "offset"'
        )).all()
    assert [d[:4] for d in dead] == [
        (2, "p0", "seg-000002.jsonl", 3), (2, "p1", "seg-000002.jsonl", 3),
        (2, "p1", "seg-000002.jsonl", 4), (2, "p1", "seg-000002.jsonl", 5),
    ]
    assert dead[0][4:] == ("duplicate id a: first seen at p0@0", '{"id": "a", "ts": 100, "line": "alpha"}')
    assert dead[1][4] == "duplicate id d: first seen at p1@2"
    assert dead[2][4].startswith("late: event time 50 is in window [0, 60)")
    assert dead[3][4].startswith("not a JSON object") and dead[3][5] == "{broken"
    # the independent recount keeps exactly the records the dead letters leave
    cuts = [ws.store.cut(JOB, 1), ws.store.cut(JOB, 2)]
    kept = {(p, o) for p, o, _ in kept_records(ws.input_dir, cuts[-1], cuts[:-1], job.id_store)}
    everything = {(p, o) for p, end in cuts[-1].items() for o in range(end)}
    assert kept == everything - {(d[1], d[3]) for d in dead}


@pytest.mark.sink_unchecked("nothing runs: inject's dead letters only")
def test_the_id_store_is_the_jobs_across_its_sources(tmp_path, sqlite_url) -> None:
    """One store per job, not per source: an id one source sent is a duplicate when another sends it, and
    the one watermark (the newest event time of every source) makes a record of a source behind it late."""
    import absreplay.api as abs

    job = abs.Job("two_id_sources", id_store=abs.IdStorePolicy(window_seconds=60, allowed_lateness_seconds=0))
    for name in ("web", "app"):
        (job.source(name, abs.json_lines({"id": str, "ts": int}, time="ts", id="id"))
            .key_by("id", str).aggregate(f"{name}_n", n=abs.count()).sink(f"{name}_out", abs.SqlTable(f"ids_{name}")))
    ws = make_workspace(tmp_path, sqlite_url, job.definition())
    land(ws.input_dir / "web" / "p0" / "seg-0001", ['{"id": "o1", "ts": 190000}', '{"id": "o2", "ts": 200000}'])
    ws.coordinator.inject()  # the job's id watermark: 200 s, so the window [60 s, 120 s) is forgotten
    # the app source's first records: o3 is in that forgotten window, o1 is web's
    land(ws.input_dir / "app" / "p0" / "seg-0001", ['{"id": "o3", "ts": 110000}', '{"id": "o1", "ts": 190000}'])
    ws.coordinator.inject()
    with ws.store.engine.connect() as c:
        dead = c.execute(text('SELECT partition, "offset", reason FROM dead_letters ORDER BY "offset"')).all()
    assert [(p, o) for p, o, _ in dead] == [("app/p0", 0), ("app/p0", 1)]
    assert dead[0][2].startswith("late: event time 110 is in window [60, 120)")
    assert dead[1][2] == "duplicate id o1: first seen at web/p0@0"


@pytest.mark.parametrize("seed", range(6))
def test_store_and_recount_agree_on_random_arrivals(tmp_path, sqlite_url, seed) -> None:
    """Random ids from a small pool (many re-landed), event times drifting forward with
    stragglers (some late), several barriers: the store's dead letters are exactly what
    the plain-Python reference drops."""
    rng = random.Random(seed)
    policy = IdStorePolicy(window_seconds=50, allowed_lateness_seconds=rng.choice([0, 30, 100]),
                           expected_ids_per_window=rng.choice([1, 20, 1000]), false_positive_rate=0.1)
    ws = make_workspace(tmp_path, sqlite_url, dataclasses.replace(wordcount(), id_store=policy))
    now, segment = 0, 0
    for _ in range(rng.randint(3, 6)):
        for p in rng.sample(["p0", "p1", "p2"], rng.randint(1, 3)):
            records = []
            for _ in range(rng.randint(1, 40)):
                now += rng.randint(0, 4)
                ts = max(0, now - rng.choice([0, 0, 0, 20, 120]))
                records.append({"id": str(rng.randint(0, 150)), "ts": ts, "line": f"w{rng.randint(0, 9)}"})
            segment += 1
            land_jsonl_segment(ws.input_dir / p, f"seg-{segment:06d}.jsonl", records)
        assert ws.coordinator.inject().checkpoint_id is not None
    cuts = [ws.store.cut(JOB, ck.checkpoint_id) for ck in ws.store.checkpoints(JOB)]
    with ws.store.engine.connect() as c:
        dead = set(c.execute(text('SELECT partition, "offset" FROM dead_letters')).all())
        late = c.execute(text("SELECT count(*) FROM dead_letters WHERE reason LIKE 'late%'")).scalar_one()
    kept = {(p, o) for p, o, _ in kept_records(ws.input_dir, cuts[-1], cuts[:-1], policy)}
    everything = {(p, o) for p, end in cuts[-1].items() for o in range(end)}
    assert kept == everything - dead
    assert dead and kept
    with ws.store.sessions() as s:
        assert s.scalar(select(func.count()).select_from(RecordId)) <= len(kept)
    if policy.allowed_lateness_seconds == 0:
        assert late > 0
