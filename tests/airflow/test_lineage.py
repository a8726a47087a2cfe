"""OpenLineage dataset names of sources and sinks (``absreplay.airflow.lineage``), by the naming conventions.

The events themselves are checked where a processing run emits them: ``tests/airflow/test_dags_run.py``.
"""

from __future__ import annotations

from absreplay.commands.airflow_demo import isolate_airflow_home

isolate_airflow_home()  # before airflow is imported: its configuration is read once

import pytest  # noqa: E402

from absreplay.airflow.lineage import dataset_name, lineage  # noqa: E402
from coordinator.settings import Settings  # noqa: E402
from coordinator.sinks.declarations import DeltaTable, ParquetDirectory, SqlTable  # noqa: E402


@pytest.mark.parametrize(("uri", "expected"), [
    ("postgres://db.example:5432/shop/public/orders", ("postgres://db.example:5432", "shop.public.orders")),
    ("mysql://db.example:3306/shop/orders", ("mysql://db.example:3306", "shop.orders")),
    ("sqlite:/var/lib/abs/catalog.db/counts", ("sqlite:/var/lib/abs/catalog.db", "counts")),
    ("file:///data/out%20put/parquet", ("file", "/data/out put/parquet")),
    ("s3://bucket/warehouse/views", ("s3://bucket", "warehouse/views")),
    ("abfss://c@acct.dfs.core.windows.net/t", ("abfss://c@acct.dfs.core.windows.net", "t")),
])
def test_locations_get_openlineage_names(uri: str, expected: tuple[str, str]) -> None:
    assert dataset_name(uri) == expected


def test_a_job_reports_its_sources_in_and_its_sinks_out_without_a_password(tmp_path) -> None:
    import absreplay.api as abs

    job = abs.Job("lineage_demo", parallelism=1)
    clicks = job.source("clicks", abs.json_lines({"user": str, "ts": int}, time="ts"))
    job.source("tiers", abs.csv({"user": str, "tier": str}))
    per_user = clicks.key_by("user", str).aggregate("per_user", clicks=abs.count())
    per_user.sink("to_sql", SqlTable("per_user", url="postgresql+psycopg2://me:s3cret@db.example/shop"))
    per_user.sink("to_files", ParquetDirectory(str(tmp_path / "out")))
    per_user.sink("to_delta", DeltaTable("s3://lake/per_user"))
    settings = Settings.from_env({"ABS_HOME": str(tmp_path), "ABS_DATA_DIR": str(tmp_path / "data")})
    found = lineage(job.definition(), settings)
    assert {(d.namespace, d.name): [f.name for f in d.facets["schema"].fields] for d in found.inputs} == {
        ("file", str(tmp_path / "data" / "lineage_demo" / "input" / "clicks")): ["user", "ts"],
        ("file", str(tmp_path / "data" / "lineage_demo" / "input" / "tiers")): ["user", "tier"],
    }
    outs = {(d.namespace, d.name): [(f.name, f.type) for f in d.facets["schema"].fields] for d in found.outputs}
    columns = [("user", "string"), ("clicks", "long")]  # Spark DDL names, as declared
    assert outs == {
        ("postgres://db.example:5432", "shop.public.per_user"): columns,
        ("file", str(tmp_path / "out")): columns,
        ("s3://lake", "per_user"): columns,
    }
    assert "s3cret" not in repr(found)


def test_a_delta_source_is_its_table(tmp_path) -> None:
    import absreplay.api as abs

    job = abs.Job("lineage_delta", parallelism=1)
    (job.source("orders", abs.delta_source("s3://lake/orders", {"customer": str, "amount": int}))
        .key_by("customer", str).aggregate("per_customer", n=abs.count())
        .sink("out", SqlTable("per_customer")))
    settings = Settings.from_env({"ABS_HOME": str(tmp_path), "ABS_DATA_DIR": str(tmp_path / "data")})
    found = lineage(job.definition(), settings)
    assert {(d.namespace, d.name): [f.name for f in d.facets["schema"].fields] for d in found.inputs} == {
        ("s3://lake", "orders"): ["customer", "amount"]}


def test_a_delta_source_names_its_table_with_its_variables_read(tmp_path, monkeypatch) -> None:
    import absreplay.api as abs

    monkeypatch.setenv("ORDERS_BUCKET", "lake")
    monkeypatch.delenv("ORDERS_TABLE", raising=False)
    job = abs.Job("lineage_delta_var", parallelism=1)
    (job.source("orders", abs.delta_source("s3://${ORDERS_BUCKET}/${ORDERS_TABLE:-orders}", {"customer": str}))
        .key_by("customer", str).aggregate("per_customer", n=abs.count())
        .sink("out", SqlTable("per_customer")))
    settings = Settings.from_env({"ABS_HOME": str(tmp_path), "ABS_DATA_DIR": str(tmp_path / "data")})
    assert [(d.namespace, d.name) for d in lineage(job.definition(), settings).inputs] == [("s3://lake", "orders")]


def test_input_on_an_object_store_is_named_by_its_bucket(tmp_path) -> None:
    import absreplay.api as abs

    job = abs.Job("lineage_s3", parallelism=1)
    (job.source("clicks", abs.json_lines({"user": str}))
        .key_by("user", str).aggregate("per_user", n=abs.count()).sink("out", SqlTable("per_user")))
    settings = Settings.from_env({"ABS_HOME": str(tmp_path), "ABS_DATA_DIR": "s3a://lake/abs"})
    found = lineage(job.definition(), settings)
    assert [(d.namespace, d.name) for d in found.inputs] == [("s3a://lake", "abs/lineage_s3/input")]
