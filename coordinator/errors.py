"""The one exception hierarchy of ABS Replay.

Every error that can reach a user derives from ``AbsError`` and carries the
exit code the command line reports: 2 for bad input or usage (nothing was
written), 1 for a failure while doing the work.
"""

from __future__ import annotations


class AbsError(Exception):
    """Base of every error ABS Replay raises on purpose."""

    exit_code = 1


class UsageError(AbsError):
    """Bad input: an unknown job, a malformed setting, a bad path. Nothing was written."""

    exit_code = 2


class UnknownJobError(UsageError):
    def __init__(self, job: str, known: list[str], broken: list[str] | None = None) -> None:
        failed = f"; job files that failed to load: {'; '.join(broken)}" if broken else ""
        super().__init__(f"unknown job {job!r}; known jobs: {', '.join(known) or 'none'}{failed}")
        self.job = job


class ConfigError(UsageError):
    """A setting (environment variable, connection) is malformed."""


class CatalogUnavailableError(UsageError):
    """The catalog database cannot be reached or is not migrated."""


class CatalogNotMigratedError(CatalogUnavailableError):
    """The catalog database is reachable but has no schema yet (``absreplay db upgrade``)."""


class SourceError(UsageError):
    """The source directory layout is wrong (e.g. a partition that is a file)."""


class CheckpointNotFoundError(UsageError):
    def __init__(self, job: str, checkpoint_id: int, why: str = "does not exist") -> None:
        super().__init__(f"checkpoint {checkpoint_id} of job {job!r} {why}")
        self.job = job
        self.checkpoint_id = checkpoint_id


class IllegalTransitionError(AbsError):
    """A lifecycle transition the state machine does not allow (a bug, not bad input)."""


class StateIntegrityError(AbsError):
    """A state file is missing or does not match its recorded checksum."""


class TolerableFailuresExceededError(AbsError):
    """More consecutive checkpoint failures than the job's policy tolerates."""


class FencedError(AbsError):
    """A processing run lost its lease (its connection dropped) and another run took the job: the
    fencing token on the job row moved on, so this run may not write any more."""

    def __init__(self, job: str, ours: int, current: int) -> None:
        super().__init__(
            f"job {job!r}: this run lost its lease (fencing token {ours}, the job is at {current}): "
            f"another run has taken the job, so this one stopped without writing; nothing is lost"
        )
        self.job = job


class SinkCommitError(AbsError):
    """A completed checkpoint's output could not be committed to its sink. Nothing of it was
    written (one transaction), and the commits of later checkpoints wait for it: sinks commit
    in checkpoint order."""

    def __init__(self, job: str, checkpoint_id: int, table: str, cause: BaseException) -> None:
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        super().__init__(
            f"committing checkpoint {checkpoint_id} of job {job!r} into {table} failed "
            f"({cause.__class__.__name__}: {first}); nothing of it was written and later checkpoints "
            f"wait for it: fix the cause, then run `absreplay finalize {job}` again"
        )
        self.job, self.checkpoint_id = job, checkpoint_id


class SinkSchemaError(UsageError):
    """A sink's target exists with other columns or types than the job declares: nothing was
    written; rename the target or make the declaration match it."""


class DeadLetterShareError(AbsError):
    """An inject's new records are dead letters beyond the job's ``max_dead_letter_share``. The barrier
    is registered all the same (its records and dead letters are in the catalog: nothing is lost); the
    failure is there so that someone looks. Retrying would only inject the next barrier, so an Airflow
    task fails at once (``absreplay.airflow.orchestration.fails_without_retry``)."""


class CatalogBusyError(AbsError):
    """SQLite: another process held the catalog's write lock for longer than the busy timeout."""


class EnvironmentFailure(AbsError):
    """Something outside ABS Replay failed (a file, the catalog server, Spark): one line naming it."""


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def _spark_line(exc: BaseException) -> str:
    """The line of a Spark/Py4J error that says what failed (not "An error occurred while calling o42")."""
    text = str(exc)
    for line in text.splitlines():
        line = line.strip().removeprefix(": ")
        if "Exception:" in line or "Error:" in line or line.startswith("["):
            return line[:500]
    return _first_line(text)[:500]


def as_user_error(exc: BaseException) -> AbsError | None:
    """A failure a user can cause or meet, as an AbsError with one line that names what and where;
    None for what is a bug of ours (the caller lets its traceback through)."""
    if isinstance(exc, AbsError):
        return exc
    module = type(exc).__module__
    name = exc.__class__.__name__
    if module.startswith("sqlalchemy"):
        orig = getattr(exc, "orig", None) or exc
        first = _first_line(str(orig))
        if "database is locked" in first:
            return CatalogBusyError(
                "the SQLite catalog stayed locked by another writer longer than its busy timeout "
                "(ABS_SQLITE_BUSY_TIMEOUT_S); nothing of this command was written: try again, or use PostgreSQL "
                "for concurrent writers"
            )
        return EnvironmentFailure(f"the catalog database failed ({orig.__class__.__name__}: {first})")
    if isinstance(exc, OSError):
        where = " ".join(str(f) for f in (exc.filename, exc.filename2) if f)
        what = exc.strerror or _first_line(str(exc))
        return EnvironmentFailure(f"file system: {what}" + (f": {where}" if where else ""))
    if module.startswith(("pyspark", "py4j")):
        return EnvironmentFailure(f"Spark failed ({name}): {_spark_line(exc)}")
    if module.startswith("pyarrow"):
        return EnvironmentFailure(f"reading or writing Arrow/Parquet failed ({name}): {_first_line(str(exc))}")
    return None
