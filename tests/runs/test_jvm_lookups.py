"""A run's session asks the JVM for a class or a static method once (spark_jobs.jvm_lookups): PySpark's
column functions make no lookups after the first, and what they compute is unchanged."""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JError
from pyspark.sql import functions as F

from spark_jobs import jvm_lookups


@pytest.fixture
def lookups(spark, monkeypatch):
    """The reflection commands (py4j's lookups) the test's session sends, as (kind, name) pairs."""
    client = spark.sparkContext._gateway._gateway_client
    sent: list[tuple[str, str]] = []
    send = client.send_command

    def counting(command, *args, **kwargs):
        parts = command.split("\n")
        if parts[0] == "r":
            sent.append((parts[1], parts[2] if parts[1] == "u" else f"{parts[2]}.{parts[3]}"))
        return send(command, *args, **kwargs)

    monkeypatch.setattr(client, "send_command", counting)
    return sent


def test_column_functions_look_up_their_classes_and_methods_once(spark, lookups) -> None:
    jvm_lookups.install(spark)  # a second install changes nothing (build_session made the first)

    def query() -> list:
        df = spark.createDataFrame([("a b", 1), ("b", 2)], "s string, n long")
        words = df.select(F.explode(F.split(F.lower(F.col("s")), " ")).alias("w"), F.lit(1).alias("one"))
        return sorted(tuple(r) for r in words.groupBy("w").agg(F.sum("one").alias("n")).collect())

    assert query() == [("a", 1), ("b", 2)]
    first = list(lookups)
    lookups.clear()
    assert query() == [("a", 1), ("b", 2)]
    assert lookups == [], f"looked up again: {lookups} (the first time: {first})"


def test_what_is_not_a_class_or_a_method_is_asked_again(spark, lookups) -> None:
    jvm = spark.sparkContext._jvm
    for _ in range(2):  # a member that does not exist fails each time, and is looked up each time
        with pytest.raises(Py4JError, match="does not exist"):
            jvm.java.lang.Integer.noSuchMemberHere  # noqa: B018 - the lookup is the test
    assert lookups.count(("m", "java.lang.Integer.noSuchMemberHere")) == 2
    # a static field's value is read each time (it may change); the class holding it is kept
    lookups.clear()
    assert jvm.java.lang.Integer.MAX_VALUE == jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
    assert lookups.count(("m", "java.lang.Integer.MAX_VALUE")) == 2
    # an unqualified name, resolved through PySpark's imports, is kept: the second use asks nothing
    jvm.PythonUtils.toSeq([1])
    lookups.clear()
    jvm.PythonUtils.toSeq([1])
    assert lookups == []
