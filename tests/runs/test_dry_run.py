"""A dry run (the operators' output schemas from empty inputs, which a restore needs for a join's
state) plans only: it starts no Spark job, whatever the operators (a join, a loop). It used to
materialize a join's table and run a loop's rounds on empty data: a few seconds of every restore
in a new JVM."""

from __future__ import annotations


import pytest

from tests.helpers import JOBS_DIR

from coordinator.dataflow.discovery import get_job
from absreplay_examples.definitions import connected_components
from spark_jobs.operators.dataflow import Dataflow

pytestmark = [pytest.mark.spark]
JOBS = str(JOBS_DIR)


def jobs_started(spark, group: str, action) -> list[int]:
    sc = spark.sparkContext
    sc.setJobGroup(group, "a dry run")
    try:
        action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return list(sc.statusTracker().getJobIdsForGroup(group))


def test_a_join_state_schema_comes_from_planning_alone(spark, monkeypatch) -> None:
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    flow = Dataflow(get_job("views_by_country"))
    schemas = {}
    assert jobs_started(spark, "dry-join", lambda: schemas.update(enrich=flow.state_schema(spark, "enrich"))) == []
    assert {"user", "_side", "country", "updated"} <= set(schemas["enrich"].fieldNames())


def test_a_loop_dry_run_runs_no_round(spark) -> None:
    flow = Dataflow(connected_components())
    assert jobs_started(spark, "dry-loop", lambda: flow._dry_run(spark)) == []
    # and a real epoch on the same empty input does run Spark jobs: the check above can fail
    assert jobs_started(spark, "real-loop", lambda: flow.quiesce(
        spark, flow.empty_state(spark, flow.loop.name), spark.createDataFrame([], flow.back_edge_schema), 1)) != []
