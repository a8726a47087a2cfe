"""Engines, sessions and schema migration of the catalog.

``ABS_DATABASE_URL`` names the catalog: SQLite (embedded default) or
PostgreSQL. Errors that a user can fix (a malformed URL, a server that does
not answer, a schema that is not migrated) become ``UsageError`` subclasses
with a one-line message that never shows a password.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from coordinator.errors import (
    CatalogBusyError, CatalogNotMigratedError, CatalogUnavailableError, ConfigError, as_user_error,
)

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent.parent / "migrations"


def parse_url(url: str) -> URL:
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(f"ABS_DATABASE_URL is malformed ({exc.__class__.__name__}): expected sqlite:///PATH or postgresql://USER@HOST:PORT/DB") from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ConfigError(
            f"ABS_DATABASE_URL uses {parsed.get_backend_name()!r}; supported: sqlite, postgresql"
        )
    if parsed.drivername == "postgresql":
        # SQLAlchemy 2.1 would pick psycopg 3; the project ships psycopg2
        parsed = parsed.set(drivername="postgresql+psycopg2")
    return parsed


def safe_url(url: str | URL) -> str:
    parsed = url if isinstance(url, URL) else make_url(url)
    return parsed.render_as_string(hide_password=True)


def busy_timeout_s() -> float:
    """How long a SQLite writer waits for another one (``ABS_SQLITE_BUSY_TIMEOUT_S``, default 60 s)."""
    raw = os.environ.get("ABS_SQLITE_BUSY_TIMEOUT_S", "60")
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"ABS_SQLITE_BUSY_TIMEOUT_S must be a number of seconds, got {raw!r}") from None
    if value < 0:
        raise ConfigError(f"ABS_SQLITE_BUSY_TIMEOUT_S must be >= 0, got {raw!r}")
    return value


def make_engine(url: str) -> Engine:
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"timeout": busy_timeout_s()})
        _serialize_sqlite_writers(engine)
    else:
        engine = create_engine(parsed, pool_pre_ping=True, connect_args={"connect_timeout": 10})
    return engine


def _serialize_sqlite_writers(engine: Engine) -> None:
    """SQLite: every transaction starts with BEGIN IMMEDIATE, so writers queue instead of failing."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s() * 1000)}")
        # WAL + NORMAL: a commit survives a crash of the process (not of the OS) without an fsync each
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def check_reachable(engine: Engine) -> None:
    try:
        with engine.connect():
            pass
    except OperationalError as exc:
        first = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise CatalogUnavailableError(
            f"catalog database {safe_url(engine.url)} is unreachable: {first}"
        ) from None


def alembic_config(url: str):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # '%' would be read as interpolation by configparser
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str) -> str:
    """Migrate the catalog to head; returns the head revision."""
    from alembic import command
    from alembic.script import ScriptDirectory

    engine = make_engine(url)
    check_reachable(engine)
    engine.dispose()
    cfg = alembic_config(url)
    command.upgrade(cfg, "head")
    return ScriptDirectory.from_config(cfg).get_current_head()


def ensure_migrated(engine: Engine) -> None:
    check_reachable(engine)
    try:
        tables = set(inspect(engine).get_table_names())
    except SQLAlchemyError as exc:
        error = as_user_error(exc)
        if isinstance(error, CatalogBusyError):
            raise error from None
        raise CatalogUnavailableError(f"cannot read the catalog {safe_url(engine.url)}: {error}") from None
    if "checkpoints" not in tables:
        raise CatalogNotMigratedError(
            f"catalog {safe_url(engine.url)} has no schema: run `absreplay db upgrade` first"
        )


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
