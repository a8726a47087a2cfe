"""The S3A properties the coordinator reads, where Spark reads them (``coordinator.storage.hadoop_conf``), and
the filesystems they configure (``coordinator.storage.filesystems``)."""

from __future__ import annotations

import json

import pyarrow.fs as pafs
import pytest

from coordinator.errors import ConfigError
from coordinator.storage import filesystems, hadoop_conf
from coordinator.storage.location import Location, at


def conf_dirs(tmp_path, core: dict[str, str], defaults: dict[str, str]) -> dict[str, str]:
    (tmp_path / "hadoop").mkdir()
    (tmp_path / "hadoop" / "core-site.xml").write_text(
        "<configuration>" + "".join(f"<property><name>{k}</name><value>{v}</value></property>"
                                    for k, v in core.items()) + "</configuration>")
    (tmp_path / "spark").mkdir()
    (tmp_path / "spark" / "spark-defaults.conf").write_text(
        "# a comment\n" + "".join(f"{k}  {v}\n" for k, v in defaults.items()))
    return {"HADOOP_CONF_DIR": str(tmp_path / "hadoop"), "SPARK_CONF_DIR": str(tmp_path / "spark")}


def test_spark_defaults_override_core_site_and_buckets_override_both(tmp_path) -> None:
    env = conf_dirs(tmp_path, {"fs.s3a.endpoint": "http://core:9000", "fs.s3a.path.style.access": "true",
                               "dfs.replication": "1"},
                    {"spark.hadoop.fs.s3a.endpoint": "http://spark:9000", "spark.executor.cores": "2",
                     "spark.hadoop.fs.s3a.bucket.logs.endpoint": "http://logs:9000"})
    found = hadoop_conf.s3a_properties(env)
    assert found == {"fs.s3a.endpoint": "http://spark:9000", "fs.s3a.path.style.access": "true",
                     "fs.s3a.bucket.logs.endpoint": "http://logs:9000"}
    assert hadoop_conf.for_bucket(found, "logs") == {"endpoint": "http://logs:9000", "path.style.access": "true"}
    assert hadoop_conf.for_bucket(found, "data") == {"endpoint": "http://spark:9000", "path.style.access": "true"}


def test_an_executor_takes_what_its_driver_shipped(tmp_path) -> None:
    env = conf_dirs(tmp_path, {"fs.s3a.endpoint": "http://core:9000"}, {})
    shipped = hadoop_conf.ship({"spark.hadoop.fs.s3a.access.key": "k", "spark.app.name": "x"}, env)
    assert json.loads(shipped) == {"fs.s3a.endpoint": "http://core:9000", "fs.s3a.access.key": "k"}
    # the executor's host has no configuration files: the driver's properties come in its environment
    assert hadoop_conf.s3a_properties({hadoop_conf.EXECUTOR_ENV: shipped}) == json.loads(shipped)
    assert "SECRET" in hadoop_conf.EXECUTOR_ENV  # Spark redacts it where it shows its configuration
    with pytest.raises(ConfigError, match="not a JSON object"):
        hadoop_conf.s3a_properties({hadoop_conf.EXECUTOR_ENV: "{oops"})


def test_a_broken_core_site_is_named(tmp_path) -> None:
    (tmp_path / "core-site.xml").write_text("<configuration><property>")
    with pytest.raises(ConfigError, match="core-site.xml is not valid XML"):
        hadoop_conf.s3a_properties({"HADOOP_CONF_DIR": str(tmp_path)})


def test_schemes_and_bad_uris() -> None:
    assert filesystems.scheme("/data/x") == "file" and filesystems.scheme("S3A://b/x") == "s3a"
    assert filesystems.is_object_store("s3a://b/x") and not filesystems.is_object_store("hdfs://nn/x")
    with pytest.raises(ConfigError, match="names no bucket"):
        filesystems.filesystem("s3a:///x")
    with pytest.raises(ConfigError, match=r"gs:// is not supported"):
        filesystems.filesystem("gs://b/x")


def test_a_folder_marker_is_a_folder_not_a_file(tmp_path) -> None:
    fs = pafs.LocalFileSystem()
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.txt").write_text("x")
    (tmp_path / "a" / "g.txt").write_text("y")
    assert sorted(f.base_name for f in filesystems.files_under(fs, str(tmp_path / "a"))) == ["f.txt", "g.txt"]
    assert filesystems.files_under(fs, str(tmp_path / "missing")) == []


def test_a_location_walks_like_a_path(tmp_path) -> None:
    (tmp_path / "in" / "p0").mkdir(parents=True)
    (tmp_path / "in" / "p0" / "s1").write_bytes(b"a\nb\n")
    root = Location(f"file://{tmp_path}/in")
    assert at(str(tmp_path / "in")) == (tmp_path / "in").resolve()  # a local path stays a Path
    assert [e.name for e in root.iterdir()] == ["p0"] and (root / "p0").is_dir()
    seg = root / "p0" / "s1"
    assert seg.is_file() and seg.read_bytes() == b"a\nb\n" and seg.stat().st_size == 4
    assert str(seg) == f"file://{tmp_path}/in/p0/s1" and seg.parent == root / "p0"
    assert not (root / "nope").exists()


def test_a_delta_table_on_s3_takes_the_s3a_settings(tmp_path, monkeypatch) -> None:
    env = conf_dirs(tmp_path, {"fs.s3a.endpoint": "127.0.0.1:9000", "fs.s3a.connection.ssl.enabled": "false",
                               "fs.s3a.path.style.access": "true", "fs.s3a.access.key": "k",
                               "fs.s3a.secret.key": "s"}, {})
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert filesystems.delta_storage_options(f"{tmp_path}/table") is None
    assert filesystems.delta_storage_options("s3a://b/table") == {
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}


def test_a_parquet_directory_sink_is_refused_on_an_object_store() -> None:
    import pyarrow as pa

    from coordinator.sinks.parquet_dir import ParquetDirectory

    with pytest.raises(ConfigError, match=r"Parquet directory sink s3a://b/out: it commits by renaming folders"):
        ParquetDirectory("s3a://b/out", pa.schema([("k", pa.string())]), ("k",))
