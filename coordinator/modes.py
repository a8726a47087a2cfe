"""The modes a run is asked for, each an enum defined once: parsed at the edge (the command line, the
processing application's arguments, the DAGs' params) and read as these types from there on.

- ``SnapshotMode``: when a run's snapshots are taken: asynchronously (ABS), synchronously (stop the
  world), or none (the no-snapshot baseline).
- ``Consistency``: what a job is declared for: aligned checkpoints (exactly once) or weak, each operator
  snapshotting on its own (``coordinator.checkpoints.weak``).
- ``RecoveryKind`` and ``RecoveryMode``: what a recovery does and which tasks it restarts; a
  ``RecoveryRequest`` asks for one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from coordinator.errors import UsageError

E = TypeVar("E", bound=StrEnum)


class SnapshotMode(StrEnum):
    ASYNC = "async"
    SYNC = "sync"
    NONE = "none"


class Consistency(StrEnum):
    EXACTLY_ONCE = "exactly_once"
    WEAK = "weak"


class RecoveryKind(StrEnum):
    RECOVER = "recover"
    REWIND = "rewind"
    #: to a new version of the job's declaration (``coordinator.upgrades.upgrade``)
    UPGRADE = "upgrade"


class RecoveryMode(StrEnum):
    FULL = "full"
    PARTIAL = "partial"


#: what ``checkpoints.snapshot_mode`` records for the snapshots of a weak job's run: the audit and the view
#: tell a weak job's checkpoints by it
WEAK_SNAPSHOTS = "weak"


def parse(kind: type[E], value: object, option: str) -> E:
    """``value`` as a ``kind``, or UsageError (exit 2) naming ``option`` and the values it takes."""
    try:
        return kind(value)
    except ValueError:
        choices = [m.value for m in kind]
        raise UsageError(f"{option} must be {', '.join(choices[:-1])} or {choices[-1]}, not {value!r}") from None


def recorded(mode: SnapshotMode, consistency: str) -> str:
    """What a run's checkpoints record as their snapshot mode: a weak job's snapshots are their own kind
    (none stays the no-snapshot baseline)."""
    return WEAK_SNAPSHOTS if consistency == Consistency.WEAK and mode is not SnapshotMode.NONE else str(mode)


@dataclass(frozen=True)
class RecoveryRequest:
    """A recovery, rewind or upgrade asked for, by the command line, the processing application's arguments or
    the recover DAG's form (which hands it from task to task as plain values: ``as_params``, ``from_params``)."""

    kind: RecoveryKind
    mode: RecoveryMode
    #: None: the latest completed checkpoint (an upgrade's: the start of the input)
    checkpoint: int | None
    #: a missing or corrupt file moves the recovery to the previous completed checkpoint
    fallback: bool = False
    #: the run of the job's recover DAG that asked for it (None: the command line)
    airflow_run_id: str | None = None
    #: the job it is for, where the request travels without its job (the DAG's tasks)
    job: str | None = None

    def as_params(self) -> dict[str, Any]:
        """The request as plain values (what Airflow's XCom carries)."""
        return {"job": self.job, "kind": str(self.kind), "mode": str(self.mode), "checkpoint": self.checkpoint,
                "fallback": self.fallback, "airflow_run_id": self.airflow_run_id}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> RecoveryRequest:
        return cls(parse(RecoveryKind, params["kind"], "kind"), parse(RecoveryMode, params["mode"], "mode"),
                   params["checkpoint"], params["fallback"], params["airflow_run_id"], params["job"])
