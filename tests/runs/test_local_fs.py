"""A run's session writes local files through spark_jobs.local_fs: the file system Spark had (Hive's
ProxyLocalFileSystem with Spark's jars), the same modes and renames, without a chmod process per file."""

from __future__ import annotations

import stat
from pathlib import Path

from spark_jobs import local_fs


def file_system(spark):
    jvm = spark.sparkContext._jvm
    return jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI.create("file:///"),
                                                   spark.sparkContext._jsc.hadoopConfiguration())


def test_the_session_writes_with_the_same_modes_and_renames_as_hadoop(spark, tmp_path: Path) -> None:
    fs = file_system(spark)
    assert fs.getClass().getName() == f"{local_fs.CLASS}$NoOverwrite"  # Spark's own is Hive's ProxyLocalFileSystem
    assert local_fs.install(spark) == fs.getClass().getName()  # a second install changes nothing

    out = tmp_path / "out"
    spark.range(100).selectExpr("id", "id % 3 AS k").write.partitionBy("k").parquet(str(out))
    assert spark.read.parquet(str(out)).count() == 100
    # Hadoop's modes (its umask, 022): folders 0755, files 0644, as chmod set them
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*") if p.is_dir()} == {0o755}
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*") if p.is_file()} == {0o644}

    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    assert not fs.rename(path(str(tmp_path / "a")), path(str(tmp_path / "b")))  # Hive's: onto a file, no
    assert (tmp_path / "b").read_text() == "b"
    assert fs.rename(path(str(tmp_path / "a")), path(str(tmp_path / "c"))) and (tmp_path / "c").read_text() == "a"

    # modes set on their own: the nine bits through Java, the sticky bit still through chmod
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission
    for mode in (0o600, 0o751, 0o1777):
        fs.setPermission(path(str(tmp_path / "c")), permission(mode))
        assert stat.S_IMODE((tmp_path / "c").stat().st_mode) == mode


def test_a_class_that_cannot_be_compiled_leaves_hadoops_file_system(spark, monkeypatch, capsys) -> None:
    def no_room(*args):
        raise OSError(28, "No space left on device")

    try:
        assert local_fs.uninstall(spark) == "org.apache.hadoop.hive.ql.io.ProxyLocalFileSystem"
        with monkeypatch.context() as m:
            m.setattr(local_fs, "compiled", no_room)
            assert local_fs.install(spark) == "org.apache.hadoop.hive.ql.io.ProxyLocalFileSystem"
        err = capsys.readouterr().err
        assert "Hadoop's local file system stays (chmod per file): [Errno 28] No space left on device" in err
        assert file_system(spark).getClass().getName() == "org.apache.hadoop.hive.ql.io.ProxyLocalFileSystem"
    finally:  # the worker's later tests get the session as build_session made it
        assert local_fs.install(spark) == f"{local_fs.CLASS}$NoOverwrite"
    assert file_system(spark).getClass().getName() == f"{local_fs.CLASS}$NoOverwrite"
