"""Store tasks name the executor that holds their store as their preferred location (``spark_jobs.state.stores.placement``).

On local Spark there is one executor, so what this checks is the mechanism: the pinned RDD (compiled by Janino
in the driver's JVM, its jar added for the executors) passes every row through, its partitions prefer what they
were given, and each task records the executor it ran on, which the next stage then prefers. The two-host test
(tests/state/test_separate_hosts.py) checks that tasks go back to their stores on a cluster.
"""

from __future__ import annotations

import threading

import pytest

from spark_jobs.state.stores.placement import Placement

pytestmark = pytest.mark.spark


def preferred(df) -> list[list[str]]:
    """Each partition's preferred locations, as the scheduler asks the pinned RDD under ``df``'s plan."""
    rdd = df._jdf.queryExecution().analyzed().rdd()
    parts = rdd.partitions()
    return [list(rdd.preferredLocations(parts[i]).mkString("\n").split("\n")) if rdd.preferredLocations(
        parts[i]).nonEmpty() else [] for i in range(len(parts))]


def test_a_pinned_stage_prefers_the_stores_executors_and_learns_where_its_tasks_ran(spark) -> None:
    placement = Placement(spark, {"count": {0: "executor_gone-host_7"}})
    df = spark.range(0, 1000, 1, 2)
    pinned = placement.pinned(df, "count", 2)
    assert preferred(pinned) == [["executor_gone-host_7"], []]
    assert sorted(r.id for r in pinned.collect()) == list(range(1000))  # every row, once
    ran = placement.where("count")
    assert sorted(ran) == [0, 1] and all(where.startswith("executor_") and where.endswith("_driver")
                                         for where in ran.values()), ran
    # the next stage of that store goes where the last one ran
    assert preferred(placement.pinned(df, "count", 2)) == [[ran[0]], [ran[1]]]
    # another operator's stores are its own
    other = placement.pinned(df, "other", 2)
    assert preferred(other) == [[], []]
    # a later look reads only what ran since: the other operator's tasks, the first's stay as they were
    assert other.count() == 1000
    assert sorted(placement.where("other")) == [0, 1] and placement.where("count") == ran
    assert placement._seen == 4
    assert placement.where("count") == ran and placement._seen == 4  # nothing new ran


class FirstCopyWaits:
    """A Placement's accumulator whose first copy, once its records are being read, waits (at most ``wait_s``)
    for ``go``: another thread's look can run in between, as the snapshot writer's does beside the run's."""

    def __init__(self, real, wait_s: float) -> None:
        self.real, self.wait_s, self.copies = real, wait_s, 0
        self.reading, self.go = threading.Event(), threading.Event()

    def value(self):
        self.copies += 1
        copy = self.real.value()
        if self.copies > 1:
            return copy
        outer = self

        class Copy:
            def size(self) -> int:
                return copy.size()

            def subList(self, start: int, end: int):  # noqa: N802 - the Java method's name
                outer.reading.set()
                outer.go.wait(outer.wait_s)
                return copy.subList(start, end)

        return Copy()


def test_two_threads_updating_at_once_keep_the_newest_location(spark) -> None:
    """The run's thread and the snapshot writer's thread both ask where the stores are: the second must neither read the first's
    records again nor let the first's older copy undo the location it took in (it did, before the lock: a
    bench run died on a record read as an empty string)."""
    placement = Placement(spark, {})
    real = placement._ran
    placement._ran = acc = FirstCopyWaits(real, wait_s=2.0)
    real.add("count|0|executor_a_1")
    first = threading.Thread(target=placement.where, args=("count",))
    first.start()
    assert acc.reading.wait(30)
    real.add("count|0|executor_b_2")  # the store's next task ran elsewhere, after the first copy was taken

    def second() -> None:
        placement.where("count")
        acc.go.set()

    later = threading.Thread(target=second)
    later.start()
    first.join(30)
    later.join(30)
    assert placement.locations == {"count": {0: "executor_b_2"}} and placement._seen == 2
    assert placement.where("count") == {0: "executor_b_2"}
