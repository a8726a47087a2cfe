"""Store tasks go back to the executor that holds their store: preferred locations, as Spark SS gives them.

Spark Structured Streaming's state store coordinator remembers which executor
loaded each partition's store, and its state RDD names that executor as the
partition's preferred location, so the next batch's task runs there and finds the
store loaded. PySpark exposes no preferred locations, so this module makes the
RDD that does, on the JVM side: ``PinnedRDD`` (Java source below, compiled in the
driver's JVM and handed to the executors as a jar: ``spark_jobs.jvm_classes``) wraps the RDD
of a store stage, passes its partitions through unchanged, names each
partition's preferred location (``executor_<host>_<executor id>``, a Spark
``ExecutorCacheTaskLocation``), and records, as each task runs, the executor it
ran on in an accumulator. ``Placement`` turns those records into the next
stage's preferences: store i is wherever its last task ran (it holds the store
now, hit or reload). Each ack records it (``task_acks.store_location``), so the
next run, a new application with new executors, starts from the same places:
Spark files a task whose preferred executor is gone under that executor's host,
and the stores are on the host (its local directory outlives the application).

A preference is no promise: Spark runs a task elsewhere when that executor is
gone or busy (every run sets ``spark.locality.wait`` to 0), and that task
reloads its store there. Driver side only.
"""

from __future__ import annotations

import threading

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.jvm_classes import compiled

CLASS = "AbsReplayPinnedRDD"
SOURCE = """
public class AbsReplayPinnedRDD extends org.apache.spark.rdd.RDD {
  private final org.apache.spark.rdd.RDD parent;
  private final String[] prefs;
  private final String tag;
  private final org.apache.spark.util.CollectionAccumulator ran;

  public AbsReplayPinnedRDD(org.apache.spark.rdd.RDD parent, String[] prefs, String tag,
                            org.apache.spark.util.CollectionAccumulator ran) {
    super(parent, scala.reflect.ClassTag$.MODULE$.AnyRef());
    this.parent = parent;
    this.prefs = prefs;
    this.tag = tag;
    this.ran = ran;
  }

  public scala.collection.Iterator compute(org.apache.spark.Partition split, org.apache.spark.TaskContext context) {
    org.apache.spark.SparkEnv env = org.apache.spark.SparkEnv.get();
    ran.add(tag + "|" + split.index() + "|executor_" + env.blockManager().blockManagerId().host() + "_"
            + env.executorId());
    return parent.iterator(split, context);
  }

  public org.apache.spark.Partition[] getPartitions() {
    return parent.partitions();
  }

  public scala.collection.immutable.Seq getPreferredLocations(org.apache.spark.Partition split) {
    int i = split.index();
    String[] mine = i < prefs.length && prefs[i] != null ? new String[] {prefs[i]} : new String[0];
    return scala.jdk.javaapi.CollectionConverters.asScala(java.util.Arrays.asList(mine)).toList();
  }
}
"""


class Placement:
    """Where each store is (the executor its last task ran on), and the means to send its next task there."""

    def __init__(self, spark: SparkSession, seen: dict[str, dict[int, str]]) -> None:
        self.spark = spark
        sc = spark.sparkContext
        self._constructor = compiled(spark, CLASS, SOURCE).getConstructors()[0]
        self._ran = sc._jvm.org.apache.spark.util.CollectionAccumulator()
        sc._jsc.sc().register(self._ran, "absreplay-store-locations")
        self._seen = 0
        #: tag (an operator) -> subtask -> the executor that holds its store (``seen``: an earlier application's
        #: executor, gone: Spark then prefers its host, ``TaskSetManager`` files a task under both)
        self.locations: dict[str, dict[int, str]] = {tag: dict(where) for tag, where in seen.items()}
        # the run's thread and the snapshot writer's (a full snapshot's store tasks are pinned too) both ask
        self._lock = threading.Lock()

    def pinned(self, df: DataFrame, tag: str, partitions: int) -> DataFrame:
        """``df`` (partition i: store i of ``tag``) with each partition preferring the executor that holds its
        store, and recording where it runs."""
        gateway = self.spark.sparkContext._gateway
        prefs = gateway.new_array(gateway.jvm.String, partitions)
        for i, where in self.where(tag).items():
            if i < partitions:
                prefs[i] = where
        args = gateway.new_array(gateway.jvm.Object, 4)
        args[0], args[1], args[2], args[3] = df._jdf.queryExecution().toRdd(), prefs, tag, self._ran
        rdd = self._constructor.newInstance(args)
        return DataFrame(self.spark._jsparkSession.internalCreateDataFrame(rdd, df._jdf.schema(), False), self.spark)

    def where(self, tag: str) -> dict[int, str]:
        """Where each store of ``tag`` is now (a copy): subtask -> executor."""
        with self._lock:
            self._take_in()
            return dict(self.locations.get(tag, {}))

    def _take_in(self) -> None:
        """Take in where the tasks ran since the last call, in the order Spark merged their records (under the
        lock: two threads in here at once read the same records twice, or none, the second having moved ``_seen``
        past them, and an older copy could undo a newer location). The records cross py4j as one string:
        iterating the Java list took a round trip per record, and its end a Java exception that PySpark converts
        at length (18 ms each, 0.1-0.2 s of a small epoch). Only the records added since the last call cross: the
        accumulator is appended to for the whole run."""
        ran = self._ran.value()  # a copy, in merge order: what the last call read is its first _seen records
        total = ran.size()
        if total > self._seen:
            text = self.spark.sparkContext._jvm.java.lang.String.join("\n", ran.subList(self._seen, total))
            for record in text.split("\n"):
                tag, i, where = record.split("|", 2)
                self.locations.setdefault(tag, {})[int(i)] = where
        self._seen = total
