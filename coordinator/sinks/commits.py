"""What a finalize or a recovery committed to each sink, as a consumer of the sink is told it.

One ``SinkCommits`` per sink that received at least one checkpoint's output: the checkpoints
whose transactions went COMMITTED (in order), the rows they wrote, and the sink's high-water
marks after them. A DEDUPLICATED transaction (a replay whose records the sink held already)
or an ABORTED one wrote nothing and is not a commit here; a committed checkpoint whose epoch
changed no row is (the sink is now as of that checkpoint), with its 0 rows counted.

Two ways to ask, for the two ways commits happen:

- ``of_checkpoints``: a finalize in this process knows the checkpoints it committed
  (``FinalizeReport.committed``);
- ``newest_committed`` before and ``committed_after`` after: a recovery runs in another process
  (the processing application); transactions commit in checkpoint order per sink and a
  recovery's replays take new, higher ids, so what it committed is what lies beyond the marks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from coordinator.catalog.models import SinkTransaction
from coordinator.checkpoints.lifecycle import SinkTxnStatus
from coordinator.dataflow.jobs import JobDefinition
from coordinator.sinks import transactions


@dataclass(frozen=True)
class SinkCommits:
    sink: str
    #: the sink's location (``SinkDeclaration.location``): database and table, or the files' place
    uri: str
    #: the checkpoints committed, in order
    checkpoints: list[int]
    #: rows written, summed over those checkpoints (a key updated by two of them counts twice)
    rows: int
    #: source partition -> offset: every record before it is in the sink
    high_water_marks: dict[str, int]


def of_checkpoints(s: Session, job: JobDefinition, checkpoint_ids: Iterable[int], catalog_url: str) -> list[SinkCommits]:
    """The commits of ``checkpoint_ids`` (what one finalize committed), per sink in declaration order."""
    ids = sorted(set(checkpoint_ids))
    if not ids:
        return []
    return _collect(s, job, catalog_url, SinkTransaction.checkpoint_id.in_(ids))


def newest_committed(s: Session, job: str) -> dict[str, int]:
    """Sink name -> the newest checkpoint committed to it (a sink with none is absent)."""
    return dict(s.execute(
        select(SinkTransaction.sink, func.max(SinkTransaction.checkpoint_id))
        .where(SinkTransaction.job == job, SinkTransaction.status == SinkTxnStatus.COMMITTED)
        .group_by(SinkTransaction.sink)
    ).all())


def committed_after(s: Session, job: JobDefinition, marks: Mapping[str, int], catalog_url: str) -> list[SinkCommits]:
    """The commits beyond ``marks`` (``newest_committed`` read before), per sink in declaration order."""
    beyond = or_(*(and_(SinkTransaction.sink == sink.name, SinkTransaction.checkpoint_id > marks.get(sink.name, 0))
                   for sink in job.sinks))
    return _collect(s, job, catalog_url, beyond)


def _collect(s: Session, job: JobDefinition, catalog_url: str, where: ColumnElement[bool]) -> list[SinkCommits]:
    committed: dict[str, list[tuple[int, int]]] = {}
    for sink, checkpoint_id, rows in s.execute(
        select(SinkTransaction.sink, SinkTransaction.checkpoint_id, SinkTransaction.rows)
        .where(SinkTransaction.job == job.name, SinkTransaction.status == SinkTxnStatus.COMMITTED, where)
        .order_by(SinkTransaction.checkpoint_id)
    ):
        committed.setdefault(sink, []).append((checkpoint_id, rows or 0))
    return [
        SinkCommits(sink.name, sink.declaration.location(catalog_url), [c for c, _ in committed[sink.name]],
                    sum(r for _, r in committed[sink.name]), transactions.watermarks(s, job.name, sink.name))
        for sink in job.sinks if sink.name in committed
    ]
