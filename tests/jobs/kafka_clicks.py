"""A job whose source is Kafka (tests/servers/test_kafka_jobs.py runs it): clicks (JSON: id, event time ``ts``
in epoch ms, user) from two topics, ``$KAFKA_TOPICS`` (comma-separated), on ``$KAFKA_BOOTSTRAP``; counted per
user for ever, and per user in one-minute tumbling windows (watermark = newest click - 30 s). A click whose
id was seen already is a dead letter (the id store)."""

import os

import absreplay.api as abs

job = abs.Job("kafka_clicks", parallelism=2, description="clicks from Kafka per user, and per user and minute")
clicks = abs.kafka(os.environ.get("KAFKA_TOPICS", "clicks-a,clicks-b").split(","),
                   bootstrap_servers="${KAFKA_BOOTSTRAP}",
                   records=abs.json_lines({"id": str, "ts": int, "user": str}, time="ts", id="id"))
by_user = job.source("clicks", clicks).key_by("user", str)
by_user.aggregate("per_user", clicks=abs.count()).sink("per_user_out", abs.SqlTable("kafka_clicks_per_user"))
by_user.window("per_minute", abs.Tumbling(ms=60_000), time="ts", delay_ms=30_000,
               clicks=abs.count()).sink("per_minute_out", abs.SqlTable("kafka_clicks_per_minute"))
