"""One source read by two keyed operators (tests/runs/test_verify_late_records.py runs it): clicks (JSON lines:
id, event time ``ts`` in epoch ms, user, page) counted per user for ever, and per user in 10-minute
tumbling windows (watermark = newest click - 5 minutes). A click too late for its window is a dead letter
of the window only: the per-user aggregate still counts it."""

import absreplay.api as abs

MINUTE = 60_000

job = abs.Job("late_clicks", parallelism=2, description="clicks per user, and per user and 10 minutes")
by_user = job.source("clicks", abs.json_lines({"id": str, "ts": int, "user": str, "page": str},
                                              time="ts", id="id")).key_by("user", str)
by_user.aggregate("per_user", clicks=abs.count(), last=abs.max("ts")).sink(
    "per_user_out", abs.SqlTable("late_clicks_per_user"))
by_user.window("per_10_minutes", abs.Tumbling(minutes=10), time="ts", delay_ms=5 * MINUTE,
               clicks=abs.count()).sink("per_10_minutes_out", abs.SqlTable("late_clicks_per_10_minutes"))
