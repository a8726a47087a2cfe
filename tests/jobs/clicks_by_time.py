"""The same 10-minute tumbling windows of clicks per user on two kinds of event time
(tests/sources/test_event_time_spark.py runs both on the same clicks): ``clicks_iso`` reads ``ts`` as ISO-8601
strings (a timestamp), ``clicks_ms`` as epoch milliseconds. Both deduplicate by the click's id and keep a
5-minute delay: their window sinks must be equal."""

import datetime

import absreplay.api as abs

MINUTE = 60_000


def clicks_job(name: str, ts: type) -> abs.Job:
    job = abs.Job(name, parallelism=2, description=f"clicks per user and 10 minutes ({name})")
    (job.source("clicks", abs.json_lines({"id": str, "user": str, "ts": ts}, time="ts", id="id"))
        .key_by("user", str)
        .window("per_10_minutes", abs.Tumbling(minutes=10), time="ts", delay_ms=5 * MINUTE, clicks=abs.count())
        .sink("out", abs.SqlTable(f"{name}_per_10_minutes")))
    return job


iso = clicks_job("clicks_iso", datetime.datetime)
ms = clicks_job("clicks_ms", int)
