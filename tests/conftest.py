"""Shared fixtures: catalogs built with `alembic upgrade head` on SQLite and PostgreSQL,
one SparkSession per test session, and a workspace (data dir, state root) per test.

PostgreSQL is never skipped: a test that needs it fails when the server is down.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from coordinator.catalog.db import parse_url, upgrade

PG_ADMIN_URL = os.environ.get("ABS_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _pg_url(db: str) -> str:
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + db


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ABS_DATABASE_URL", "ABS_DATA_DIR", "ABS_STATE_URI", "ABS_HOME", "ABS_FAULTS"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database, dropped afterwards."""
    name = f"abs_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(parse_url(PG_ADMIN_URL), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001 - report, never skip
        pytest.fail(f"PostgreSQL at {PG_ADMIN_URL} is required for this test: {exc}")
    url = _pg_url(name)
    upgrade(url)
    yield url
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    upgrade(url)
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog_url(request: pytest.FixtureRequest) -> str:
    """Runs a test once against each catalog backend (the store contract suite)."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture(scope="session")
def spark():
    # py4j logs "closing down" from __del__ at interpreter exit, after pytest closed the streams
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from spark_jobs.session import build_session

    session = build_session("absreplay-tests", 2, "local[2]")
    yield session
    session.stop()
