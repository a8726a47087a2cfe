"""Every sink is an Airflow asset (issue 31, item 1), without an Airflow server.

The URI names the data and never a credential, in the form Airflow itself normalizes to (so a
hand-written ``Asset(uri)`` in a downstream DAG is the same asset); a finalize reports, per sink,
the checkpoints it committed, their rows and the high-water marks, and nothing when it committed
nothing; what a recovery (another process) committed is found beyond the marks read before it;
the events go through the job's alias, one per sink that received a commit.
tests/airflow/test_airflow_standalone.py shows a downstream DAG scheduled on one in a real Airflow.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from absreplay.commands.airflow_demo import isolate_airflow_home

isolate_airflow_home()  # before airflow is imported: its configuration is read once

import pytest  # noqa: E402
from airflow.sdk import Asset  # noqa: E402
from airflow.sdk.execution_time.context import OutletEventAccessors  # noqa: E402
from airflow.sdk.execution_time.task_runner import _serialize_outlet_events  # noqa: E402

from absreplay.airflow import orchestration, sink_assets  # noqa: E402
from coordinator.checkpoints import recovery  # noqa: E402
from coordinator.modes import RecoveryKind, RecoveryMode  # noqa: E402
from coordinator.errors import ConfigError  # noqa: E402
from coordinator.sinks import commits  # noqa: E402
from coordinator.sinks.declarations import DeltaTable, ParquetDirectory, SqlTable  # noqa: E402
from coordinator.sinks.locations import sql_table_uri, storage_uri  # noqa: E402
from tests.helpers import make_workspace, stage_counts  # noqa: E402

SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize(("url", "table", "expected"), [
    (f"postgresql+psycopg2://absreplay:{SECRET}@DB.example.org/catalog?sslmode=require", "wordcount_counts",
     "postgres://db.example.org:5432/catalog/public/wordcount_counts"),
    (f"postgresql://absreplay:{SECRET}@10.0.0.5:6543/catalog", "t", "postgres://10.0.0.5:6543/catalog/public/t"),
    (f"mysql+pymysql://u:{SECRET}@mysql.local/shop", "orders", "mysql://mysql.local:3306/shop/orders"),
    ("sqlite:////var/lib/abs/catalog.db", "counts", "sqlite:/var/lib/abs/catalog.db/counts"),
])
def test_a_sql_table_is_named_by_its_database_and_table_never_its_credentials(url: str, table: str,
                                                                            expected: str) -> None:
    uri = sql_table_uri(url, table)
    assert uri == expected
    assert SECRET not in uri and "absreplay@" not in uri
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Airflow warns about a password, and about nothing else here
        assert Asset(uri).uri == Asset(uri).name == uri  # already Airflow's normal form


def test_locations_of_files_are_absolute_and_remote_ones_lose_their_credentials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert storage_uri("out/parquet/") == f"file://{tmp_path}/out/parquet"
    assert storage_uri(f"file://{tmp_path}/delta") == f"file://{tmp_path}/delta"
    assert storage_uri(f"s3://AKIA:{SECRET}@bucket/tables/views/?versionId=3") == "s3://bucket/tables/views"
    # the container of abfss names the data: it stays
    assert storage_uri("abfss://lake@acct.dfs.core.windows.net/views") == "abfss://lake@acct.dfs.core.windows.net/views"
    for uri in (storage_uri("out/parquet"), storage_uri("s3://bucket/tables/views")):
        assert Asset(uri).uri == uri


def test_each_declaration_has_its_location_with_variables_expanded(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = f"postgresql://abs:{SECRET}@catalog.internal:5432/abs"
    monkeypatch.setenv("REPORT_DB", f"postgresql://writer:{SECRET}@reports:5433/reporting")
    monkeypatch.setenv("LAKE", str(tmp_path / "lake"))
    monkeypatch.delenv("UNSET_DB", raising=False)
    assert SqlTable("counts").location(catalog) == "postgres://catalog.internal:5432/abs/public/counts"
    # an empty URL (a variable's empty default) is the catalog, as the target itself takes it
    assert SqlTable("counts", url="${UNSET_DB:-}").location(catalog) == SqlTable("counts").location(catalog)
    assert SqlTable("per_minute", url="${REPORT_DB}").location(catalog) == \
        "postgres://reports:5433/reporting/public/per_minute"
    assert ParquetDirectory("${LAKE}/parquet").location(catalog) == f"file://{tmp_path}/lake/parquet"
    assert DeltaTable("${LAKE}/delta", {"AWS_SECRET_ACCESS_KEY": SECRET}).location(catalog) == \
        f"file://{tmp_path}/lake/delta"
    # a variable unset, or empty, without a default: one line naming it (exit 2)
    monkeypatch.setenv("EMPTY_LAKE", "")
    with pytest.raises(ConfigError, match=r"^sink location '\$\{UNSET_DB\}/parquet' names \$\{UNSET_DB\}, which is not set$"):
        ParquetDirectory("${UNSET_DB}/parquet").location(catalog)
    with pytest.raises(ConfigError, match=r"names \$\{EMPTY_LAKE\}, which is not set$"):
        DeltaTable("${EMPTY_LAKE}").location(catalog)


def test_a_finalize_reports_what_it_committed_to_each_sink_and_nothing_when_it_committed_nothing(
        tmp_path: Path, catalog_url: str) -> None:
    ws = make_workspace(tmp_path, catalog_url)
    uri = ws.job.sinks[0].declaration.location(catalog_url)
    for cid, counts in {1: {"a": 1, "b": 2}, 2: {"a": 2, "c": 1, "d": 4}}.items():
        ws.store.trigger(ws.job.name, lambda s, c, end=10 * cid: ({"p0": end, "p1": end + 1}, 0, 0))
        stage_counts(ws, cid, counts, cid - 1 or None)
        ws.complete(cid)
    report = orchestration.finalize_checkpoints(ws.settings, ws.job.name)
    assert report["committed"] == [1, 2]
    assert report["sink_commits"] == [{"sink": "sink", "uri": uri, "checkpoints": [1, 2], "rows": 5,
                                       "high_water_marks": {"p0": 20, "p1": 21}}]
    assert orchestration.finalize_checkpoints(ws.settings, ws.job.name)["sink_commits"] == []

    # a recovery commits in another process: what lies beyond the marks read before it is its commits
    marks = orchestration.sink_commit_marks(ws.settings, ws.job.name)
    assert marks == {"sink": 2}
    ws.store.trigger(ws.job.name, lambda s, c: ({"p0": 30, "p1": 31}, 0, 0))
    stage_counts(ws, 3, {"e": 1}, 2)
    ws.complete(3)
    ws.coordinator.finalize()
    assert orchestration.sink_commits_after(ws.settings, ws.job.name, marks) == [
        {"sink": "sink", "uri": uri, "checkpoints": [3], "rows": 1, "high_water_marks": {"p0": 30, "p1": 31}}]

    # replays of epochs the sink holds already are DEDUPLICATED: written nowhere, reported nowhere
    marks = orchestration.sink_commit_marks(ws.settings, ws.job.name)
    rid = recovery.start(ws.store, ws.job.name, RecoveryKind.RECOVER, RecoveryMode.FULL, 2)
    replays = recovery.reset_after(ws.store, ws.job, 2, rid, RecoveryKind.RECOVER).replays
    assert replays == {4: 3}
    stage_counts(ws, 4, {"e": 1}, 2)
    ws.complete(4)
    assert ws.coordinator.finalize().committed == [4]  # settled, as a DEDUPLICATED transaction
    assert orchestration.sink_commits_after(ws.settings, ws.job.name, marks) == []
    with ws.store.sessions() as s:
        assert commits.of_checkpoints(s, ws.job, [4], catalog_url) == []
    assert ws.committed() == {"a": 2, "b": 2, "c": 1, "d": 4, "e": 1}


def test_events_go_through_the_alias_one_per_sink_that_received_a_commit() -> None:
    outlet_events = OutletEventAccessors()
    published = [
        {"sink": "to_postgres", "uri": "postgres://db:5432/abs/public/per_minute", "checkpoints": [3, 4],
         "rows": 12, "high_water_marks": {"p0": 40}},
        {"sink": "to_delta", "uri": "file:///lake/views", "checkpoints": [4], "rows": 3,
         "high_water_marks": {"p0": 40}},
    ]
    sink_assets.publish_sink_commits(outlet_events, "views", published)
    sink_assets.publish_sink_commits(outlet_events, "views", [])  # a finalize that committed nothing
    events = list(_serialize_outlet_events(outlet_events))
    assert [(e["source_alias_name"], e["dest_asset_key"]["uri"], e["extra"]) for e in events] == [
        ("abs_views_sink_commits", "postgres://db:5432/abs/public/per_minute",
         {"job": "views", "sink": "to_postgres", "checkpoints": [3, 4], "rows": 12, "high_water_marks": {"p0": 40}}),
        ("abs_views_sink_commits", "file:///lake/views",
         {"job": "views", "sink": "to_delta", "checkpoints": [4], "rows": 3, "high_water_marks": {"p0": 40}}),
    ]
    # the asset an event names is the one ``Asset(uri)`` declares in a downstream DAG
    assert all(e["dest_asset_key"]["name"] == e["dest_asset_key"]["uri"] for e in events)
