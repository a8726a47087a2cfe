"""An operator's state n and an epoch's output are immutable local copies; one that is already a few
projections and filters of such a copy (a window's state after its watermark, an aggregate's changed
rows), or holds no rows at all (a window's dead letters in an epoch without late records), is kept as it
is, without a Spark job of its own: ``keyed_operators.over_checkpoint``."""

from __future__ import annotations

from pyspark.sql import functions as F

from spark_jobs.operators.keyed_operators import NARROW_DEPTH, materialized, no_rows, over_checkpoint


def jobs_run(spark) -> int:
    """The newest Spark job's id: ids only grow (a count of the jobs Spark keeps would not, once it drops old ones)."""
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(), default=-1)


def test_projections_and_filters_of_a_local_checkpoint_need_no_copy(spark) -> None:
    copy = spark.range(20).withColumn("updated", F.col("id") % 3).localCheckpoint(eager=True)
    changed = copy.where(F.col("updated") == 2).select("id", (F.col("id") * 2).alias("twice"))
    empty = no_rows(changed).select("twice")  # a window's epoch without late records: its dead letters
    assert over_checkpoint(copy) and over_checkpoint(changed) and over_checkpoint(empty)
    before = jobs_run(spark)
    assert materialized(changed, dry=False) is changed and materialized(empty, dry=False) is empty
    assert jobs_run(spark) == before  # no Spark job ran
    assert empty.collect() == []
    assert sorted(r.twice for r in changed.collect()) == [4, 10, 16, 22, 28, 34]


def test_what_is_not_one_is_copied(spark) -> None:
    copy = spark.range(20).localCheckpoint(eager=True)
    deep = copy
    for k in range(NARROW_DEPTH + 1):
        deep = deep.where(F.col("id") != k)
    not_copies = {
        "a shuffle": copy.groupBy((F.col("id") % 2).alias("k")).count(),
        "a union": copy.unionByName(copy),
        "random numbers": copy.select("id", F.rand(7).alias("r")),
        "an RDD never checkpointed": spark.createDataFrame(spark.sparkContext.parallelize([(1,), (2,)]), "id long"),
        "local rows": spark.createDataFrame([(1,)], "id long"),
        "a limit": copy.limit(2),
        f"more than {NARROW_DEPTH} filters deep": deep,
    }
    assert [what for what, df in not_copies.items() if over_checkpoint(df)] == []
    before = jobs_run(spark)
    copied = materialized(not_copies["a shuffle"], dry=False)
    assert over_checkpoint(copied) and jobs_run(spark) > before
    assert sorted(tuple(r) for r in copied.collect()) == [(0, 10), (1, 10)]
