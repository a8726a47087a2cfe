"""The processing lease: at most one processing run per job at a time.

PostgreSQL: a session-level advisory lock, held on a dedicated connection for
the run. SQLite: an exclusive ``flock`` on a lock file beside the database.
Both vanish with their holder, so a killed run never leaves a stale lease; a
second run does not wait, it stops at once with exit code 2.

Fencing: an advisory lock also vanishes when its connection drops while the run
goes on. So taking the lease bumps ``jobs.fencing_token`` and yields it; the run
writes through ``CheckpointStore.fenced(token)``, whose every transaction checks
the token under the job row lock. A run whose lease was taken over cannot ack,
stage or commit (``FencedError``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, func, select, update
from sqlalchemy.exc import DBAPIError

from coordinator.catalog.models import Job
from coordinator.errors import UsageError

if TYPE_CHECKING:
    from datetime import datetime

    from coordinator.checkpoints.store import CheckpointStore


class LeaseHeldError(UsageError):
    def __init__(self, job: str) -> None:
        super().__init__(
            f"another processing run of job {job!r} holds its lease; "
            "wait for it to finish (or for Airflow's run to end) and try again"
        )


def lease_key(job: str) -> int:
    """A stable signed 64-bit key for pg_advisory_lock."""
    return int.from_bytes(hashlib.sha256(f"absreplay:process:{job}".encode()).digest()[:8], "big", signed=True)


def next_fencing_token(engine: Engine, job: str) -> int | None:
    """Bump the job's fencing token (None: the job has no row yet, nothing to fence)."""
    with engine.begin() as conn:
        return conn.execute(
            update(Job).where(Job.name == job).values(fencing_token=Job.fencing_token + 1)
            .returning(Job.fencing_token)
        ).scalar_one_or_none()


#: how long a run waits for a lease held by a maintenance step (expiry holds it for milliseconds);
#: a lease held by another run is still held then, and the run stops with LeaseHeldError
RUN_LEASE_WAIT_S = 3.0


def _try_until(attempt, deadline: float) -> bool:
    while not attempt():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


@contextmanager
def processing_lease(engine: Engine, job: str, wait_s: float = 0.0, fence: bool = True) -> Iterator[int | None]:
    """Hold the job's lease, trying for ``wait_s`` seconds; yields the run's fencing token (bumped
    unless ``fence`` is False: a maintenance step is not a run and fences nobody)."""
    deadline = time.monotonic() + wait_s
    token = (lambda: next_fencing_token(engine, job)) if fence else (lambda: None)
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            key = lease_key(job)

            def attempt() -> bool:
                taken = conn.execute(select(func.pg_try_advisory_lock(key))).scalar_one()
                conn.commit()
                return taken

            if not _try_until(attempt, deadline):
                raise LeaseHeldError(job)
            try:
                yield token()
            finally:
                try:
                    conn.execute(select(func.pg_advisory_unlock(key)))
                    conn.commit()
                except DBAPIError:
                    conn.invalidate()  # the connection dropped: its lock went with it
        return
    database = engine.url.database
    lock_path = Path(database + f".{job}.lock") if database and database != ":memory:" else None
    if lock_path is None:
        yield token()
        return
    fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o644)

    def attempt() -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    try:
        if not _try_until(attempt, deadline):
            raise LeaseHeldError(job)
        yield token()
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def expire_unless_processing(store: CheckpointStore, job: str, now: datetime | None = None) -> list[int]:
    """Expire the job's timed-out PENDING checkpoints, but only while no processing run holds its
    lease: a live run may still be writing them, and a checkpoint failed under it would leave its
    snapshot without acks (the run would see DISCARDED). Returns the expired ids ([] while a run is live).

    The job row is locked first, so the lease is held only for the expiry itself, never while
    waiting for another writer: a run starting meanwhile waits at most milliseconds for it."""
    with store.sessions.begin() as s:
        store.lock_job(s, job)
        try:
            with processing_lease(store.engine, job, fence=False):
                return store.expire_timed_out_in(s, job, now)
        except LeaseHeldError:
            return []
