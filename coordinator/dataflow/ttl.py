"""State TTL in epochs: which keys a keyed operator drops, decided from the history of epochs alone. No Spark here.

An operator declared with ``ttl_epochs=N`` (``absreplay.api``: ``aggregate`` and ``process``) drops a key
that no epoch wrote for N epochs: a key last written by the epoch at depth d of the state's lineage is
dropped by the epoch at depth d + N, unless that epoch writes it (it becomes a tombstone,
``coordinator.sinks.deletes``). "Written" is a touch: an aggregate's key that took a record, a process
function's key it returned a row for (Flink's ``OnCreateAndWrite``); reading it does not touch it.

Epochs are counted along the lineage (``coordinator.catalog.epochs.lineage``, by ``Checkpoint.epoch_start``:
the checkpoint whose cut starts each epoch), never by checkpoint ids nor by wall-clock time: a rewind's replays take new ids, a failed
checkpoint's epoch still ran. Since checkpoint ids grow along a lineage and a row's ``updated`` is the id
of the epoch that last wrote it, "untouched for N epochs" is one comparison: ``updated`` at or below the id
N epochs back (``expire_through``). A restored operator replays the same lineage after its restore point,
so it drops exactly what the original dropped.

In event time (``ttl_ms=T, time="ts"``): the operator keeps, per key, the newest event time of the records
that wrote it (the hidden state column ``EVENT_TIME``), and a watermark, the newest event time it has
written so far, advanced once per epoch and acked with the snapshot (``task_acks.watermark``), as a
window's is. An epoch drops every key it does not write whose newest event time plus T is at or before
the watermark of the epoch before: which keys go depends only on the records and where epochs end, so a
replay drops the same ones, and ``verify`` recomputes the same epochs.
"""

from __future__ import annotations

from collections.abc import Sequence

#: the hidden state column of an event-time TTL: the newest event time (epoch ms) of the records that wrote the key
EVENT_TIME = "ttl__event_ms"


def event_columns(node: object) -> tuple[tuple[str, str], ...]:
    """The state columns an operator's event-time TTL adds (none without one)."""
    return ((EVENT_TIME, "long"),) if getattr(node, "ttl_ms", None) is not None else ()


def check_ttl_ms(operator: str, ttl_ms: object, time: object, ttl_epochs: object) -> int | None:
    """``ttl_ms`` as declared (None: no event-time TTL), with the event-time column ``time``; else ValueError."""
    if ttl_ms is None:
        if time is not None:
            raise ValueError(f"operator {operator!r}: time={time!r} is the event time of a state TTL: give ttl_ms too")
        return None
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0:
        raise ValueError(f"operator {operator!r}: ttl_ms={ttl_ms!r} must be a positive whole number of milliseconds")
    if not isinstance(time, str) or not time:
        raise ValueError(f"operator {operator!r}: ttl_ms needs the records' event-time column: time='ts'")
    if ttl_epochs is not None:
        raise ValueError(f"operator {operator!r}: give ttl_epochs or ttl_ms, not both")
    return ttl_ms


def check_ttl_epochs(operator: str, ttl_epochs: object) -> int | None:
    """``ttl_epochs`` as declared (None: no TTL), else ValueError naming the operator (a bad declaration)."""
    if ttl_epochs is None:
        return None
    if isinstance(ttl_epochs, bool) or not isinstance(ttl_epochs, int) or ttl_epochs <= 0:
        raise ValueError(f"operator {operator!r}: ttl_epochs={ttl_epochs!r} must be a positive whole number of "
                         "epochs (a key no epoch writes for that many epochs is dropped)")
    return ttl_epochs


def check_consistency(job: str, operators: Sequence[str], consistency: str) -> None:
    """A weak job's operators each restore from their own snapshot, with no lineage of epochs to count."""
    if operators and consistency == "weak":
        raise ValueError(f"job {job!r}: state TTL ({', '.join(map(repr, operators))}) needs exactly-once "
                         "consistency: a weak job's operators have no common history of epochs to count")


def expire_through(before: Sequence[int], ttl_epochs: int) -> int | None:
    """The epoch being run comes after the epochs ``before`` (its state's lineage, in order): a key whose
    ``updated`` is at or below the returned checkpoint id was last written ``ttl_epochs`` or more epochs
    ago, and is dropped unless this epoch writes it. None: the lineage is too short, nothing expires."""
    return before[-ttl_epochs] if len(before) >= ttl_epochs else None
