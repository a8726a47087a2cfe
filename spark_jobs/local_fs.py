"""Hadoop's local file system without a child process per file it creates.

Without Hadoop's native library (Spark's pip package ships none), Hadoop's local file system sets the
permissions of every file and folder it creates by running ``chmod`` in a child process
(``RawLocalFileSystem.setPermission``): a Parquet write (a snapshot, a sink, a local checkpoint's files)
starts one for each file, its checksum file and each folder of the write's commit protocol. One test JVM
started 1,527 of them in 94 s (Java Flight Recorder's ``jdk.ProcessStart``); 40 small partitioned Parquet
writes take a third of the time and CPU without them (``bench/local_fs_bench.py``).

``install`` makes the JVM's ``file://`` file system one that sets the same permissions through Java
(``java.nio.file.Files.setPosixFilePermissions``) and is otherwise the file system Spark had: Hadoop's
``LocalFileSystem``, or Hive's ``ProxyLocalFileSystem``, which Spark's jars make the default (a rename
onto an existing file fails), rename and all. A mode beyond the nine permission bits (sticky, setuid)
still goes to ``chmod``; another file system (a user's ``fs.file.impl``) is left as it is, and so is
Hadoop's when the class cannot be compiled or its jar written (a line on stderr says so).

Local masters only: there the driver and its executors are one JVM, and Hadoop's one cached file system
per scheme and user serves them all, so the tasks find it without loading its class. On a cluster the
executors keep Hadoop's. Driver side, once per session (``spark_jobs.session.build_session``).
"""

from __future__ import annotations

import sys

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from spark_jobs.jvm_classes import compiled

CLASS = "AbsReplayLocalFileSystem"
SOURCE = """
public class AbsReplayLocalFileSystem extends org.apache.hadoop.fs.LocalFileSystem {
  public AbsReplayLocalFileSystem() {
    super(new AbsReplayLocalFileSystem.Raw());
  }

  /** Hive's ProxyLocalFileSystem: a rename onto an existing file fails. */
  public static class NoOverwrite extends AbsReplayLocalFileSystem {
    public boolean rename(org.apache.hadoop.fs.Path src, org.apache.hadoop.fs.Path dst) throws java.io.IOException {
      return !isFile(dst) && super.rename(src, dst);
    }
  }

  public static class Raw extends org.apache.hadoop.fs.RawLocalFileSystem {
    private static final java.nio.file.attribute.PosixFilePermission[] BITS =
        java.nio.file.attribute.PosixFilePermission.values();  // owner rwx, group rwx, others rwx: 0400 .. 0001

    public void setPermission(org.apache.hadoop.fs.Path p, org.apache.hadoop.fs.permission.FsPermission permission)
        throws java.io.IOException {
      int mode = permission.toShort();
      if ((mode & ~0777) != 0) {
        super.setPermission(p, permission);
        return;
      }
      java.util.Set set = java.util.EnumSet.noneOf(java.nio.file.attribute.PosixFilePermission.class);
      for (int i = 0; i < 9; i++) {
        if ((mode & (0400 >> i)) != 0) set.add(BITS[i]);
      }
      java.nio.file.Files.setPosixFilePermissions(pathToFile(p).toPath(), set);
    }
  }
}
"""
#: the file system Spark would use -> the one that replaces it
REPLACES = {"org.apache.hadoop.fs.LocalFileSystem": CLASS,
            "org.apache.hadoop.hive.ql.io.ProxyLocalFileSystem": f"{CLASS}$NoOverwrite"}


def install(spark: SparkSession) -> str:
    """Make ``file://`` this module's file system in the session's JVM (local masters); the class name
    of the file system ``file://`` has afterwards."""
    sc = spark.sparkContext
    jvm = sc._jvm
    uri = jvm.java.net.URI.create("file:///")
    conf = sc._jsc.hadoopConfiguration()
    current = jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf)
    ours = REPLACES.get(current.getClass().getName())
    if not sc.master.startswith("local") or ours is None:
        return current.getClass().getName()
    try:
        loader = compiled(spark, CLASS, SOURCE).getClassLoader()
    except (OSError, Py4JError) as exc:  # no jar written (a full or read-only temporary folder): Hadoop's stays
        print(f"absreplay: Hadoop's local file system stays (chmod per file): {exc}".splitlines()[0], file=sys.stderr)
        return current.getClass().getName()
    # a copy of the session's Hadoop settings that can load the class: the session's own stay as they are
    mine = jvm.org.apache.hadoop.conf.Configuration(conf)
    mine.setClassLoader(loader)
    mine.set("fs.file.impl", ours)
    current.close()  # it leaves Hadoop's cache: the next get makes ours and caches it for the whole JVM
    return jvm.org.apache.hadoop.fs.FileSystem.get(uri, mine).getClass().getName()


def uninstall(spark: SparkSession) -> str:
    """Give ``file://`` back the file system Spark would use (for A/B benchmarks and tests); its class name."""
    jvm = spark.sparkContext._jvm
    uri = jvm.java.net.URI.create("file:///")
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # never holds ours (``install`` sets a copy)
    jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf).close()
    return jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf).getClass().getName()
