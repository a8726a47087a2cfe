"""Shared fixtures: catalogs built with `alembic upgrade head` on SQLite and PostgreSQL,
one SparkSession per test session, and a workspace (data dir, state root) per test.

PostgreSQL is never skipped: a test that needs it fails when the server is down.

Markers are derived from the fixtures a test uses (``postgres`` for a PostgreSQL
catalog, ``spark`` for the shared session), so ``-m "not spark and not postgres"``
selects exactly what runs without them (``make test-fast``). Tests marked
``heavy`` (their own Spark applications, services) are scheduled first, so that
under pytest-xdist the short ones fill in around them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from sqlalchemy import create_engine, text

from absreplay.commands import jvm_archive as run_archive
from coordinator.catalog.db import parse_url, upgrade

# Every JVM the tests start (spark-submit, Airflow's, a standalone cluster's, the shared session's) runs the
# client compiler alone and the serial collector: on a 2-core machine they spend far less CPU than tiered
# compilation and G1's threads. The shared session's JVM too, though it lives as long as its xdist worker:
# the tests' plans are new to it nearly every time, so what the server compiler compiled rarely paid off.
# The client compiler alone gets a small code cache, which a shared session fills and then flushes and
# recompiles: tiered compilation's size instead (figures: docs/benchmarks.md, "The test suite's time").
# Every JVM maps Spark's classes from one archive (tests/jvm_archive.py), made by `make test` or pytest_configure.
#
# Spark settings of every JVM the tests start, the shared session's too. The tests' epochs hold tens to
# hundreds of records, and nearly every plan is new to its JVM, so what pays off on data costs here:
# - no generated code: compiling generated Java (Janino) costs more than it saves on so few rows;
# - no broadcast joins: each broadcast is a Spark job of its own, in every job whose plan has one.
# (Figures of both: docs/benchmarks.md, "The test suite's time".)
# Spark's own suites also run with both. Runs, the demo and the benchmarks keep Spark's defaults. A Spark JVM
# takes system properties named spark.* as its settings. (Not a spark-defaults.conf in a SPARK_CONF_DIR:
# Spark puts that folder on the classpath, and a JVM cannot dump a class archive with a non-empty folder on
# it, so every JVM ran without the archive.)
SPARK_SETTINGS = {"spark.sql.codegen.factoryMode": "NO_CODEGEN", "spark.sql.codegen.wholeStage": "false",
                  "spark.sql.autoBroadcastJoinThreshold": "-1"}
SPARK_PROPERTIES = " ".join(f"-D{key}={value}" for key, value in SPARK_SETTINGS.items())
JVM_OPTIONS = f"-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC {SPARK_PROPERTIES}"
ARCHIVE_ENV = "ABS_TEST_JVM_ARCHIVE"  # the archive's JVM options, from the controller to the xdist workers
NO_ARCHIVE_ENV = "ABS_TEST_JVM_ARCHIVE_MISSING"  # why there is none, when it was wanted

PG_ADMIN_URL = os.environ.get("ABS_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _jvm_options() -> str:
    return f"{JVM_OPTIONS} {os.environ.get(ARCHIVE_ENV, '')}".strip()


def _pg_url(db: str) -> str:
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + db


def _uses_postgres(item: pytest.Item) -> bool:
    if "pg_url" in item.fixturenames:
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "postgresql" in (callspec.params.get("catalog_url"),
                                                     callspec.params.get("backend"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _uses_postgres(item):
            item.add_marker(pytest.mark.postgres)
        if "spark" in item.fixturenames:
            item.add_marker(pytest.mark.spark)
    # heaviest first (stable otherwise): with --dist loadgroup each worker takes the next test when it
    # is free, so the long ones start at once and the short ones fill in around them
    items.sort(key=lambda item: -_heavy_seconds(item))


def _heavy_seconds(item: pytest.Item) -> float:
    marker = item.get_closest_marker("heavy")
    return 0.0 if marker is None else float(marker.kwargs.get("seconds", marker.args[0] if marker.args else 1))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """After the test body: judge the sink of every workspace it made (tests/sink_check.py)."""
    from tests import helpers, sink_check

    helpers.WORKSPACES.clear()
    result = yield
    unchecked = item.get_closest_marker("sink_unchecked")
    if unchecked is None:
        for ws in helpers.WORKSPACES:
            verdict = sink_check.judge(ws)
            if verdict is not None:
                what, (lost, duplicated) = verdict
                assert (lost, duplicated) == (0, 0), f"{what}: lost={lost} duplicated={duplicated}"
    helpers.WORKSPACES.clear()
    return result


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (xdist workers inherit its environment)
        if ARCHIVE_ENV not in os.environ:  # `ABS_TEST_JVM_ARCHIVE=` (empty) turns the archive off
            from tests import jvm_archive

            path = jvm_archive.ensure(JVM_OPTIONS)
            os.environ[ARCHIVE_ENV] = jvm_archive.options(path)
            if path is None:
                os.environ[NO_ARCHIVE_ENV] = "it could not be made: see the start of the run's output"
        os.environ.setdefault("JAVA_TOOL_OPTIONS", _jvm_options())
        # the suite's JVMs map its own archive (above), not one each workspace's first run would dump
        os.environ.setdefault(run_archive.ARCHIVE_ENV, "off")
    # CI: reproducible examples, no example database left behind, and the blob to replay a failure
    settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
    settings.register_profile("dev", deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_report_header(config: pytest.Config) -> str:
    archive = os.environ.get(ARCHIVE_ENV) or f"none, {os.environ.get(NO_ARCHIVE_ENV, 'turned off')}"
    return f"test JVMs: {os.environ.get('JAVA_TOOL_OPTIONS', '')}; class archive: {archive}"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ABS_DATABASE_URL", "ABS_DATA_DIR", "ABS_STATE_URI", "ABS_HOME", "ABS_FAULTS", "ABS_PARALLELISM"):
        monkeypatch.delenv(var, raising=False)


def _admin():
    return create_engine(parse_url(PG_ADMIN_URL), isolation_level="AUTOCOMMIT")


# Each catalog a test gets is a copy of one migrated at the start of its xdist worker, not migrated anew:
# `CREATE DATABASE ... TEMPLATE` (a SQLite file: its backup) costs a small part of creating and migrating one.
# tests/catalog/test_migrations.py migrates step by step for itself.
@pytest.fixture(scope="session")
def _pg_template() -> Iterator[str]:
    name = f"abs_template_{uuid.uuid4().hex[:12]}"
    admin = _admin()
    try:
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001 - report, never skip
        pytest.fail(f"PostgreSQL at {PG_ADMIN_URL} is required for this test: {exc}")
    upgrade(_pg_url(name))
    with admin.connect() as c:  # a template must have no session open on it when it is copied
        c.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = :name AND pid <> pg_backend_pid()"), {"name": name})
    yield name
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def pg_url(_pg_template: str) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database, dropped afterwards."""
    name = f"abs_test_{uuid.uuid4().hex[:12]}"
    admin = _admin()
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{_pg_template}"'))
    yield _pg_url(name)
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("catalog-template") / "catalog.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_url(tmp_path: Path, _sqlite_template: Path) -> str:
    # through SQLite's backup API: a plain copy of the file would miss what a WAL file still held
    with contextlib.closing(sqlite3.connect(_sqlite_template)) as src, \
            contextlib.closing(sqlite3.connect(tmp_path / "catalog.db")) as dst:
        src.backup(dst)
    return f"sqlite:///{tmp_path / 'catalog.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog_url(request: pytest.FixtureRequest) -> str:
    """Runs a test once against each catalog backend (the store contract suite)."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture(scope="session")
def spark():
    # py4j logs "closing down" from __del__ at interpreter exit, after pytest closed the streams
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from spark_jobs.session import build_session

    session = build_session("absreplay-tests", 2, "local[2]")  # its JVM: JAVA_TOOL_OPTIONS, as every other's
    yield session
    session.stop()


SUMMARY_KEY = "abs_summary"


@pytest.fixture
def summary(record_property):
    """``summary(line)``: a figure shown at the end of the run (lost/duplicated counts, kill
    counts), whatever the capture settings; it travels in the test's report, so it works
    under pytest-xdist too."""

    def add(line: str) -> None:
        print(line)
        record_property(SUMMARY_KEY, line)

    return add


def pytest_terminal_summary(terminalreporter) -> None:
    lines = [
        f"{report.nodeid}: {value}"
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for name, value in getattr(report, "user_properties", ())
        if name == SUMMARY_KEY
    ]
    if lines:
        terminalreporter.section("exactly-once figures")
        for line in lines:
            terminalreporter.write_line(line)
