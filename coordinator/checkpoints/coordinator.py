"""The checkpoint coordinator: inject barriers and finalize checkpoints for one job.

``inject`` records barrier n (the cut of every source partition) and never
waits for processing. ``finalize`` is what runs after processing: expire timed
out checkpoints, commit the sinks of completed ones and abort the failed ones',
apply retention, and delete state that nothing references any more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from coordinator.checkpoints import state_chain, state_files, weak
from coordinator.sources import delta_source, id_store, kafka_source, kinds, segment_changes, source
from coordinator.sinks import transactions as sinks
from coordinator.catalog import audit
from coordinator.catalog.models import DeadLetter, SourceSegment, dead_letter_columns
from coordinator.errors import DeadLetterShareError, TolerableFailuresExceededError
from coordinator.faults import fault_point
from coordinator.dataflow.jobs import JobDefinition
from coordinator.checkpoints.lease import expire_unless_processing
from coordinator.checkpoints.lifecycle import CheckpointStatus
from coordinator.sources.segment_reader import max_line_bytes
from coordinator.checkpoints.store import CheckpointStore, TriggerOutcome


@dataclass
class FinalizeReport:
    expired: list[int] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)
    aborted: list[int] = field(default_factory=list)
    subsumed: list[int] = field(default_factory=list)
    deleted_dirs: list[str] = field(default_factory=list)
    consecutive_failures: int = 0
    #: what went wrong without failing the finalize (a Kafka cluster that did not take the group's offsets)
    warnings: list[str] = field(default_factory=list)


class CheckpointCoordinator:
    def __init__(self, store: CheckpointStore, job: JobDefinition, data_dir: Path, state_uri: str) -> None:
        self.store = store
        self.job = job
        self.data_dir = data_dir
        self.state_uri = state_uri

    # -- barriers ---------------------------------------------------------------
    def inject(self, now: datetime | None = None) -> TriggerOutcome:
        self.store.register_job(self.job)
        return self.store.trigger(self.job.name, self._build_cut, now)

    def dead_letters(self, checkpoint_id: int) -> audit.EpochDeadLetters:
        """Barrier ``checkpoint_id``'s dead letters against its epoch's records (``audit.epoch_dead_letters``)."""
        return audit.epoch_dead_letters(self.store.engine, self.job.name, [checkpoint_id])[checkpoint_id]

    def check_dead_letters(self, checkpoint_id: int, dead: audit.EpochDeadLetters) -> None:
        """DeadLetterShareError (exit 1) when more of the barrier's new records are dead letters than the
        job's ``max_dead_letter_share``. Called once the barrier is committed: the failure makes someone
        look, and loses nothing (the records stay in the epoch, the dead letters in the catalog)."""
        limit = self.job.max_dead_letter_share
        if limit is None or dead.share <= limit:
            return
        raise DeadLetterShareError(
            f"barrier {checkpoint_id} of job {self.job.name!r}: {audit.percent(dead.share)} of its "
            f"{dead.records:,} new records are dead letters, above max_dead_letter_share={limit:g} (first reason: "
            f"{dead.reasons[0]!r}); the barrier is registered, its dead letters are in the catalog"
        )

    def _build_cut(self, s: Session, checkpoint_id: int) -> tuple[dict[str, int], int, int]:
        """Check the registered segments, register newly landed ones and return the cut: every
        partition's end offset.

        A registered segment that changed, was renamed, or is gone while still needed stops the
        barrier with a SourceError naming it (``coordinator.sources.segment_changes``). Records of ``.jsonl``
        segments also go through the id store: duplicates and late records become dead letters,
        which processing skips."""
        job = self.job.name
        registered = s.execute(select(*segment_changes.REGISTERED_COLUMNS).where(SourceSegment.job == job)).all()
        ends: dict[str, int] = {}
        for seg in registered:
            ends[seg.partition] = max(ends.get(seg.partition, 0), seg.first_offset + seg.records)
        known = {(seg.partition, seg.name) for seg in registered}
        root = source.input_dir(self.data_dir, job)
        listed = {p: source.list_segments(root / p) for p in source.job_partitions(root, self.job.source_names)
                  if kinds.reads_files(self.job.format_of(p))}
        found = segment_changes.check_registered(kinds.file_segments(self.job, registered), root,
                                                 {p: set(n) for p, n in listed.items()})
        for seg, mtime_ns, version in found.touched:
            s.execute(update(SourceSegment).where(SourceSegment.job == job, SourceSegment.partition == seg.partition,
                                                  SourceSegment.name == seg.name)
                      .values(mtime_ns=mtime_ns, **({"content_tag": version} if version else {})))
        renames = segment_changes.RenameCheck(root, found.vanished)
        max_line = max_line_bytes()
        new_segments = new_records = 0
        id_segments: list[tuple[source.ScannedSegment, int]] = []
        for partition, names in listed.items():
            offset = ends.get(partition, 0)
            for name in names:
                if (partition, name) in known:
                    continue
                seg = source.scan_segment(partition, root / partition / name, self.job.format_of(partition), max_line)
                renames.check(partition, name, seg.bytes, seg.checksum)
                s.add(SourceSegment(job=job, partition=partition, name=name, first_offset=offset,
                                    records=seg.records, bytes=seg.bytes, checksum=seg.checksum,
                                    mtime_ns=seg.mtime_ns, content_tag=seg.content_tag))
                s.add_all(
                    DeadLetter(job=job, checkpoint_id=checkpoint_id, partition=partition, segment=name,
                               offset=offset + bad.offset_in_segment, **dead_letter_columns(bad.reason, bad.payload))
                    for bad in seg.bad_records
                )
                if seg.id_records:
                    id_segments.append((seg, offset))
                offset += seg.records
                new_segments += 1
                new_records += seg.records
            ends[partition] = offset
        segment_changes.check_vanished(s, job, root, found.vanished)
        # a Delta source's new table versions, each a segment (``coordinator.sources.delta_source``)
        versions, version_records = delta_source.register_versions(s, self.job, checkpoint_id, registered, ends)
        # a Kafka source's offsets since the last cut, a segment per partition (``coordinator.sources.kafka_source``)
        kafka = kafka_source.register_offsets(s, self.job, checkpoint_id, registered, ends)
        id_segments += kafka.id_segments
        new_segments, new_records = new_segments + versions + kafka.segments, new_records + version_records + kafka.records
        if id_segments:
            # in this transaction: a crash before the commit forgets these ids together with the cut
            s.add_all(id_store.dead_letters_for(s, job, self.job.id_store, checkpoint_id, id_segments))
        fault_point("inject.after_cut", checkpoint_id)
        return ends, new_segments, new_records

    # -- after processing ---------------------------------------------------------
    def finalize(self, now: datetime | None = None) -> FinalizeReport:
        self.store.register_job(self.job)
        report = FinalizeReport()
        report.expired = expire_unless_processing(self.store, self.job.name, now)
        fault_point("finalize.before_commit")
        with self.store.sessions.begin() as s:
            # serialized per job: a concurrent finalize waits here, then sees what this one committed
            self.store.lock_job(s, self.job.name)
            report.committed, report.aborted = sinks.settle(s, self.job)
        if report.committed and kafka_source.sources_of(self.job):
            with self.store.sessions() as s:
                cut = sinks.cut_of(s, self.job.name, max(report.committed))
            report.warnings += kafka_source.commit_group_offsets(self.job, cut)
        report.subsumed = self.store.subsume_beyond_retention(self.job.name)
        report.deleted_dirs = self.collect_garbage()
        report.consecutive_failures = self.store.consecutive_failures(self.job.name)
        tolerable = self.store.policy(self.job.name).tolerable_failures
        if report.consecutive_failures > tolerable:
            raise TolerableFailuresExceededError(
                f"job {self.job.name!r}: {report.consecutive_failures} consecutive failed checkpoints "
                f"exceed tolerable_failures={tolerable}; see snapshot_history for the reasons"
            )
        return report

    def referenced_checkpoint_dirs(self) -> set[int]:
        """Checkpoint directories that a live catalog row still needs.

        PENDING checkpoints (being written right now) and the incremental chain
        of every COMPLETED checkpoint are kept; for a weak-consistency job, also
        each operator's own head (``coordinator.checkpoints.weak``), whatever
        became of its checkpoint, with its chain.
        """
        checkpoints = self.store.checkpoints(self.job.name)
        keep = {c.checkpoint_id for c in checkpoints if c.status == CheckpointStatus.PENDING}
        # an incremental snapshot with no changed row has no file but is still a link of the chain
        acks = {(a.checkpoint_id, a.operator, a.subtask): a for a in self.store.all_acks(self.job.name)}
        roots = {c.checkpoint_id for c in checkpoints if c.status == CheckpointStatus.COMPLETED}
        if self.job.consistency == "weak":
            roots |= {h for h in weak.heads(self.store, self.job).values() if h is not None}
        for root in sorted(roots):
            keep.add(root)
            for cid, op, sub in [k for k in acks if k[0] == root]:
                try:
                    keep.update(a.checkpoint_id for a in state_chain.walk(
                        lambda c, op=op, sub=sub: acks.get((c, op, sub)), root))
                except state_chain.MissingBase as missing:  # a broken chain: keep what it names all the same
                    keep.add(missing.base)
        return keep

    def collect_garbage(self) -> list[str]:
        """Delete checkpoint directories no catalog row references (and only those)."""
        keep = self.referenced_checkpoint_dirs()
        known = {c.checkpoint_id for c in self.store.checkpoints(self.job.name)}
        deleted = []
        for cid, uri in sorted(state_files.checkpoint_dirs(self.state_uri, self.job.name).items()):
            # a directory newer than any catalog row belongs to a writer we cannot see: keep it
            if cid in keep or cid > max(known, default=0):
                continue
            fault_point("gc.before_delete", cid)
            state_files.delete_dir(uri)
            deleted.append(uri)
        return deleted

