"""The barrier and epochs DAGs of a job whose source is Kafka (tests/jobs/kafka_clicks.py), run with dag.test()
on a PostgreSQL catalog: each barrier records every partition's last stable offset as its cut, each epochs
run spark-submits the job with Spark's Kafka connector on ``spark.jars`` (from a ``SPARK_CONF_DIR``) and its
finalize commits. Clicks of aborted transactions are in no sink, both sinks equal the plain-Python
reference, and the consumer group follows the committed cut.
"""

from __future__ import annotations

import os
from datetime import timedelta

from absreplay.commands.airflow_demo import dags_folder, isolate_airflow_home, migrate_airflow_db

isolate_airflow_home("local[2]")  # before airflow is imported: its configuration is read once

import pytest  # noqa: E402
from airflow.dag_processing.dagbag import DagBag  # noqa: E402

from coordinator.dataflow.discovery import get_job  # noqa: E402
from tests import kafka_data  # noqa: E402
from tests.helpers import JOBS_DIR, make_workspace  # noqa: E402

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.postgres, pytest.mark.heavy(seconds=170)]

JOB = "kafka_clicks"


def test_the_dags_of_a_kafka_job_cut_by_offsets_and_commit_exactly_once(tmp_path, pg_url, monkeypatch,
                                                                         summary) -> None:
    with kafka_data.click_topics(tmp_path, monkeypatch) as kafka:
        ws = make_workspace(tmp_path, pg_url, get_job(JOB), jobs_dir=str(JOBS_DIR))
        env = ws.settings.as_env()
        for key in ("ABS_HOME", "ABS_DATA_DIR", "ABS_STATE_URI", "ABS_DATABASE_URL"):
            monkeypatch.setenv(key, env[key])
        migrate_airflow_db(dict(os.environ))
        bag = DagBag(dag_folder=dags_folder())
        assert bag.import_errors == {}
        barriers, epochs = bag.dags[f"abs_{JOB}_barriers"], bag.dags[f"abs_{JOB}_epochs"]
        for task in epochs.tasks:
            task.retry_delay = timedelta(seconds=1)
        producer = kafka_data.ClickProducer(kafka, abort_every=3)
        for _ in range(2):
            for _ in range(3):
                producer.transaction()
            assert barriers.test().state == "success"
            assert epochs.test().state == "success"

        assert {c.checkpoint_id: str(c.status) for c in ws.store.checkpoints(JOB)} == {
            1: "COMPLETED", 2: "COMPLETED"}
        cuts = [ws.store.cut(JOB, c) for c in (1, 2)]
        # the last cut is every partition's end: nothing was produced after the barrier
        assert cuts[-1] == {kafka_data.partition_name(t, n): kafka.watermarks(t, n)[1]
                            for t in kafka_data.TOPICS for n in range(kafka_data.PARTITIONS)}
        expected_users, expected_windows = kafka_data.reference(producer.sent, cuts)
        tables = {s.name: s.target(pg_url).read().to_pylist() for s in ws.job.sinks
                  if s.name in ("per_user_out", "per_minute_out")}
        assert {r["user"]: r["clicks"] for r in tables["per_user_out"]} == dict(expected_users)
        assert {(r["user"], r["window_start"]): r["clicks"] for r in tables["per_minute_out"]} == dict(expected_windows)
        aborted = sum(not s.committed for s in producer.sent)
        assert aborted and sum(expected_users.values()) == len({s.click["id"] for s in producer.sent if s.committed})
        assert kafka_data.group_offsets(kafka, f"absreplay-{JOB}") == cuts[-1]
    summary(f"Airflow DAGs on Kafka: 2 barriers and epochs runs, {len(producer.sent)} clicks "
            f"({aborted} of aborted transactions, in no sink); sinks = reference, group offsets = cut")
