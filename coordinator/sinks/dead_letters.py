"""The dead letters an operator finds while processing (a window's late records), as a sink.

They are an output of the epoch like any other, so they reach the catalog's
``dead_letters`` table two-phase, exactly once, with the checkpoint that found
them: staged with the checkpoint, inserted by its commit in the catalog's own
transaction (the sink transaction's status guards a retry), deleted again by a
rewind to the checkpoint of an earlier epoch. Their ``segment`` is the operator's name.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import pyarrow as pa
from sqlalchemy import delete, insert
from sqlalchemy.orm import Session

from coordinator.catalog.models import DeadLetter, dead_letter_columns
from coordinator.sinks.base import SinkTarget
from coordinator.sinks.locations import sql_table_uri

SCHEMA = pa.schema([("partition", pa.string()), ("offset", pa.int64()), ("reason", pa.string()),
                    ("payload", pa.string())])


@dataclass(frozen=True)
class DeadLetters:
    """The catalog's dead letters of one operator."""

    operator: str

    def target(self, schema: pa.Schema, key: tuple[str, ...] | None, catalog_url: str) -> SinkTarget:
        return DeadLetterTarget(self.operator)

    def location(self, catalog_url: str) -> str:
        """The catalog's ``dead_letters`` table (``coordinator.sinks.locations``): this operator's rows are
        those whose ``segment`` is its name."""
        return sql_table_uri(catalog_url, "dead_letters")


class DeadLetterTarget:
    in_catalog = True
    key = None
    schema = SCHEMA

    def __init__(self, operator: str) -> None:
        self.operator = operator

    def describe(self) -> str:
        return f"the catalog's dead letters of operator {self.operator}"

    def commit_in(self, s: Session, job: str, sink: str, checkpoint_id: int, rows: pa.Table) -> bool:
        if rows.num_rows:
            s.execute(insert(DeadLetter), [
                {"job": job, "checkpoint_id": checkpoint_id, "partition": r["partition"], "segment": self.operator,
                 "offset": r["offset"], **dead_letter_columns(r["reason"], r["payload"].encode("utf-8"))}
                for r in rows.to_pylist()])
        return True

    def revert_in(self, s: Session, job: str, sink: str, checkpoint_id: int, rows: pa.Table,
                  later: Collection[int]) -> int:
        # those of the epochs after this one's: a recovery's deduplicated replays leave an epoch's dead letters
        # under the superseded checkpoint, whose id may be below the rewind's target
        return s.execute(delete(DeadLetter).where(
            DeadLetter.job == job, DeadLetter.segment == self.operator, DeadLetter.checkpoint_id.in_(sorted(later)),
        )).rowcount
