"""The record-id store: exactly-once for sources whose records carry ids, not just offsets.

A producer that retries re-lands records it already delivered, in new segments
and so at new offsets: offsets cannot tell the copies apart, ids can. Every id
record passes through ``IdStore.admit`` in the inject transaction, so the ids
it remembers commit or roll back together with the cut that holds them; a
duplicate becomes a dead letter, which the epoch runner skips like any other.

Ids are kept per event-time window of ``window_seconds``. In front of each
window's exact ids (``record_ids``) sits a Bloom filter (``id_filters``, kept
as ``id_filter`` says): most records are new, and a negative answer proves that
without touching SQL; only positives are looked up exactly, in batches. The
primary key of ``record_ids`` (job, record_id) is the truth: an id that a
producer reuses in another window is still caught, by the insert that conflicts.

The watermark (the largest event time seen minus ``allowed_lateness_seconds``)
bounds how long ids are kept: ``gc`` drops the windows that ended at or below
it, and a record that arrives later for such a window is LATE: its window's
ids are gone, so it cannot be deduplicated safely and is dead-lettered.

Batches of one job must not run concurrently (inject holds the job's row lock).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from coordinator.catalog.models import DeadLetter, IdFilter, IdWatermark, RecordId, dead_letter_columns
from coordinator.checkpoints.policy import IdStorePolicy
from coordinator.sources import source
from coordinator.sources.id_filter import WindowFilter, is_legacy

# stays below SQLite's and PostgreSQL's bind-parameter limits (32,766 and 65,535)
QUERY_CHUNK = 1000
INSERT_CHUNK = 2000  # rows of six parameters
# a window's filter holding this many times its capacity is rebuilt larger from the exact ids
REBUILD_FACTOR = 2

RECORD_IDS = RecordId.__table__
ID_FILTERS = IdFilter.__table__
ID_WATERMARKS = IdWatermark.__table__


@dataclass(frozen=True, slots=True)
class Arrival:
    """One id record as it arrives: its id, event time and where it landed."""

    record_id: str
    ts: int
    partition: str
    offset: int
    checkpoint_id: int


class Verdict(StrEnum):
    DUPLICATE = "DUPLICATE"
    LATE = "LATE"


@dataclass(frozen=True, slots=True)
class Rejection:
    arrival: Arrival
    verdict: Verdict
    reason: str


@dataclass
class IdStoreCounters:
    """What the store did, for benchmarks, tests and operators wondering whether the filters pay off."""

    records: int = 0
    admitted: int = 0
    #: filter said "never seen": admitted without an SQL lookup
    bloom_negatives: int = 0
    bloom_positives: int = 0
    #: ids looked up in record_ids, and in how many queries
    exact_lookups: int = 0
    lookup_queries: int = 0
    #: positives the exact lookup did not find
    false_positives: int = 0
    #: every duplicate; of them, repeats inside one batch and ids known from another window
    duplicates: int = 0
    batch_duplicates: int = 0
    reused_ids: int = 0
    late: int = 0
    filters_created: int = 0
    filters_rebuilt: int = 0
    #: filters of the hand-written format, rebuilt from their window's exact ids in the current one
    filters_migrated: int = 0
    gc_ids: int = 0
    gc_filters: int = 0

    def add(self, other: IdStoreCounters) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def bloom_negative_rate(self) -> float:
        checked = self.bloom_negatives + self.bloom_positives
        return self.bloom_negatives / checked if checked else 0.0

    def as_dict(self) -> dict[str, float]:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "bloom_negative_rate": self.bloom_negative_rate}


@dataclass
class _Window:
    bloom: WindowFilter
    items: int
    stored: bool
    dirty: bool = False


def _chunks(items: Sequence, size: int = QUERY_CHUNK) -> Iterable[Sequence]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class IdStore:
    """The id store of one job, working inside the caller's transaction (``session``)."""

    def __init__(self, session: Session, job: str, policy: IdStorePolicy | None = None) -> None:
        self.s = session
        self.job = job
        self.policy = policy or IdStorePolicy()
        self.counters = IdStoreCounters()

    # -- watermark ----------------------------------------------------------------
    def watermark(self) -> tuple[int, int] | None:
        """(watermark, max event time) of the job, None before its first id record."""
        row = self.s.execute(
            select(ID_WATERMARKS.c.watermark, ID_WATERMARKS.c.max_event_time).where(ID_WATERMARKS.c.job == self.job)
        ).first()
        return (row[0], row[1]) if row else None

    def _advance_watermark(self, current: tuple[int, int] | None, batch_max_ts: int) -> None:
        lateness = self.policy.allowed_lateness_seconds
        if current is None:
            self.s.execute(insert(ID_WATERMARKS).values(
                job=self.job, watermark=batch_max_ts - lateness, max_event_time=batch_max_ts
            ))
            return
        watermark, max_ts = current
        max_ts = max(max_ts, batch_max_ts)
        # never backwards, even if the lateness setting grows: collected windows stay collected
        watermark = max(watermark, max_ts - lateness)
        if (watermark, max_ts) != current:
            self.s.execute(
                update(ID_WATERMARKS).where(ID_WATERMARKS.c.job == self.job)
                .values(watermark=watermark, max_event_time=max_ts)
            )

    # -- filters ------------------------------------------------------------------
    def _new_filter(self) -> WindowFilter:
        return WindowFilter.sized(self.policy.expected_ids_per_window, self.policy.false_positive_rate)

    def _load_windows(self, starts: set[int]) -> dict[int, _Window]:
        """Each window's filter, once per batch; a window without one gets a fresh filter."""
        windows: dict[int, _Window] = {}
        ordered = sorted(starts)
        for chunk in _chunks(ordered):
            rows = self.s.execute(
                select(ID_FILTERS.c.window_start, ID_FILTERS.c.bits, ID_FILTERS.c["items"])
                .where(ID_FILTERS.c.job == self.job, ID_FILTERS.c.window_start.in_(chunk))
            ).all()
            for start, bits, items in rows:
                if is_legacy(bits):
                    windows[start] = self._rebuild(start, items)
                    self.counters.filters_migrated += 1
                    continue
                bloom = WindowFilter.from_bytes(bits)
                window = _Window(bloom, items, stored=True)
                if items > REBUILD_FACTOR * bloom.capacity:
                    window = self._rebuild(start, items)
                    self.counters.filters_rebuilt += 1
                windows[start] = window
        for start in ordered:
            if start not in windows:
                windows[start] = _Window(self._new_filter(), 0, stored=False)
                self.counters.filters_created += 1
        return windows

    def _rebuild(self, start: int, items: int) -> _Window:
        """The window's filter from its exact ids, sized for twice them (an overfull filter answers
        "maybe" to almost everything; a filter of the hand-written format cannot be read)."""
        bloom = WindowFilter.sized(max(2 * items, self.policy.expected_ids_per_window), self.policy.false_positive_rate)
        ids = self.s.scalars(
            select(RECORD_IDS.c.record_id).where(RECORD_IDS.c.job == self.job, RECORD_IDS.c.window_start == start)
        )
        count = 0
        for rid in ids:
            bloom.add(rid)
            count += 1
        return _Window(bloom, count, stored=True, dirty=True)

    def _save_windows(self, windows: dict[int, _Window]) -> None:
        new = []
        for start, w in windows.items():
            if not w.dirty:
                continue
            if w.stored:
                self.s.execute(
                    update(ID_FILTERS).where(ID_FILTERS.c.job == self.job, ID_FILTERS.c.window_start == start)
                    .values(bits=w.bloom.to_bytes(), items=w.items)
                )
            else:
                new.append({"job": self.job, "window_start": start, "bits": w.bloom.to_bytes(), "items": w.items})
        if new:
            self.s.execute(insert(ID_FILTERS), new)

    # -- exact ids ----------------------------------------------------------------
    def lookup(self, ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        """Where each of ``ids`` that the store knows was first seen: (partition, offset)."""
        found: dict[str, tuple[str, int]] = {}
        for chunk in _chunks(ids):
            self.counters.lookup_queries += 1
            rows = self.s.execute(
                select(RECORD_IDS.c.record_id, RECORD_IDS.c.partition, RECORD_IDS.c.offset)
                .where(RECORD_IDS.c.job == self.job, RECORD_IDS.c.record_id.in_(chunk))
            ).all()
            found.update((rid, (p, o)) for rid, p, o in rows)
        self.counters.exact_lookups += len(ids)
        return found

    def _insert(self, arrivals: Sequence[Arrival]) -> set[str]:
        """Insert new ids; the ones the primary key refuses (known from another window) are not returned.

        The hot path of a batch, so written for the driver: one multi-row
        INSERT ... ON CONFLICT DO NOTHING RETURNING per chunk (the same SQL on
        SQLite and PostgreSQL). Per-row parameter processing in SQLAlchemy cost
        twice what the database spent.
        """
        conn = self.s.connection()
        mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
        row = f"({', '.join([mark] * 6)})"
        size = self.policy.window_seconds
        inserted: set[str] = set()
        for chunk in _chunks(arrivals, INSERT_CHUNK):
            sql = (
                f'INSERT INTO {RECORD_IDS.name} (job, record_id, window_start, checkpoint_id, "partition", "offset") '
                f"VALUES {', '.join([row] * len(chunk))} ON CONFLICT (job, record_id) DO NOTHING RETURNING record_id"
            )
            params = tuple(
                v for a in chunk
                for v in (self.job, a.record_id, a.ts - a.ts % size, a.checkpoint_id, a.partition, a.offset)
            )
            inserted.update(r[0] for r in conn.exec_driver_sql(sql, params).fetchall())
        return inserted

    # -- the batch ------------------------------------------------------------------
    def admit(self, arrivals: Sequence[Arrival]) -> list[Rejection]:
        """Remember the new ids of a batch (in arrival order) and return the rest: duplicates and late records.

        Lateness is judged against the watermark as it was before the batch (the
        one the last ``gc`` collected to); the batch then advances it.
        """
        c = self.counters
        c.records += len(arrivals)
        if not arrivals:
            return []
        policy = self.policy
        size = policy.window_seconds
        mark = self.watermark()
        watermark = mark[0] if mark else None
        starts = [a.ts - a.ts % size for a in arrivals]  # each record's window: [start, start + size)
        rejected: dict[int, Rejection] = {}
        first: dict[str, int] = {}  # id -> index of its first live occurrence in the batch (in order)
        repeats: list[int] = []
        for i, a in enumerate(arrivals):
            if watermark is not None and starts[i] + size <= watermark:
                rejected[i] = Rejection(a, Verdict.LATE, (
                    f"late: event time {a.ts} is in window [{starts[i]}, {starts[i] + size}) "
                    f"which ended at or below the watermark {watermark}; its ids were collected"
                ))
            elif a.record_id in first:
                repeats.append(i)
            else:
                first[a.record_id] = i
        c.late += len(rejected)

        windows = self._load_windows({starts[i] for i in first.values()})
        positives: list[int] = []
        negatives: list[int] = []
        for rid, i in first.items():
            (positives if rid in windows[starts[i]].bloom else negatives).append(i)
        c.bloom_positives += len(positives)
        c.bloom_negatives += len(negatives)

        known = self.lookup([arrivals[i].record_id for i in positives]) if positives else {}
        fresh = [i for i in positives if arrivals[i].record_id not in known]
        c.false_positives += len(fresh)
        fresh += negatives
        inserted = self._insert([arrivals[i] for i in fresh]) if fresh else set()
        refused = [i for i in fresh if arrivals[i].record_id not in inserted]
        if refused:
            c.reused_ids += len(refused)
            known.update(self.lookup([arrivals[i].record_id for i in refused]))

        for rid, i in first.items():
            if rid in inserted:
                w = windows[starts[i]]
                w.bloom.add(rid)
                w.items += 1
                w.dirty = True
                c.admitted += 1
            else:
                rejected[i] = self._duplicate(arrivals[i], known[rid])
        for i in repeats:
            a = arrivals[i]
            j = first[a.record_id]
            seen = known[a.record_id] if j in rejected else (arrivals[j].partition, arrivals[j].offset)
            rejected[i] = self._duplicate(a, seen)
        c.batch_duplicates += len(repeats)
        c.duplicates += sum(1 for r in rejected.values() if r.verdict is Verdict.DUPLICATE)

        self._save_windows(windows)
        self._advance_watermark(mark, max(a.ts for a in arrivals))
        return [rejected[i] for i in sorted(rejected)]

    @staticmethod
    def _duplicate(a: Arrival, first_seen: tuple[str, int]) -> Rejection:
        return Rejection(a, Verdict.DUPLICATE, f"duplicate id {a.record_id}: first seen at {first_seen[0]}@{first_seen[1]}")

    def gc(self) -> tuple[int, int]:
        """Forget the windows that ended at or below the watermark: (ids deleted, filters deleted)."""
        mark = self.watermark()
        if mark is None:
            return 0, 0
        last_start = mark[0] - self.policy.window_seconds  # window_start + window_seconds <= watermark
        ids = self.s.execute(
            delete(RECORD_IDS).where(RECORD_IDS.c.job == self.job, RECORD_IDS.c.window_start <= last_start)
        ).rowcount
        filters = self.s.execute(
            delete(ID_FILTERS).where(ID_FILTERS.c.job == self.job, ID_FILTERS.c.window_start <= last_start)
        ).rowcount
        self.counters.gc_ids += ids
        self.counters.gc_filters += filters
        return ids, filters


def dead_letters_for(
    s: Session,
    job: str,
    policy: IdStorePolicy,
    checkpoint_id: int,
    segments: Sequence[tuple[source.ScannedSegment, int]],
) -> list[DeadLetter]:
    """Run the id store over newly registered ``.jsonl`` segments (each with its first offset), in
    arrival order, collect garbage, and return the duplicates and late records as dead letters."""
    arrivals = [
        Arrival(r.record_id, r.ts, seg.partition, first + r.offset_in_segment, checkpoint_id)
        for seg, first in segments
        for r in seg.id_records
    ]
    store = IdStore(s, job, policy)
    rejected = store.admit(arrivals)
    store.gc()
    # which segment holds each rejected offset: a partition's segments are contiguous, in offset order
    located: dict[str, tuple[list[int], list[source.ScannedSegment]]] = {}
    for seg, first in segments:
        firsts, segs = located.setdefault(seg.partition, ([], []))
        firsts.append(first)
        segs.append(seg)
    by_segment: dict[tuple[str, int], tuple[source.ScannedSegment, int, list[tuple[Rejection, int]]]] = {}
    for r in rejected:
        firsts, segs = located[r.arrival.partition]
        k = bisect.bisect_right(firsts, r.arrival.offset) - 1
        entry = by_segment.setdefault((r.arrival.partition, k), (segs[k], firsts[k], []))
        entry[2].append((r, r.arrival.offset - firsts[k]))
    letters = []
    for seg, _, items in by_segment.values():
        payloads = seg.previews if seg.previews is not None else source.read_payloads(seg.path, {i for _, i in items})
        letters.extend(
            DeadLetter(job=job, checkpoint_id=checkpoint_id, partition=seg.partition, segment=seg.name,
                       offset=r.arrival.offset, **dead_letter_columns(r.reason, payloads[i]))
            for r, i in items
        )
    return letters
