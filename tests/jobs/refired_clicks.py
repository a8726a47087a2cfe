"""Re-firing windows (tests/operators/test_refire.py runs it; tests/refire_data.py lands its input and recomputes
its sinks in plain Python): clicks (JSON lines: id, user, event time ``ts`` in epoch ms) per user in
1-minute tumbling windows, emitted once the watermark (newest click - 10 s) passes a window's end, and
emitted again, replacing the row, when clicks within the 90 s of allowed lateness change it. Into a SQL
table and a Parquet directory, both upserted by (user, window_start)."""

import absreplay.api as abs

WINDOW_MS, DELAY_MS, LATENESS_MS = 60_000, 10_000, 90_000

job = abs.Job("refired_clicks", parallelism=2, description="clicks per user and minute, updated by late clicks")
per_minute = (job.source("clicks", abs.json_lines({"id": str, "user": str, "ts": int}, time="ts"))
              .key_by("user", str)
              .window("per_minute", abs.Tumbling(ms=WINDOW_MS), time="ts", delay_ms=DELAY_MS,
                      allowed_lateness_ms=LATENESS_MS, refire=True, clicks=abs.count(), last=abs.max("ts")))
per_minute.sink("to_sql", abs.SqlTable("refired_clicks"))
per_minute.sink("to_parquet", abs.ParquetDirectory("${REFIRED_PARQUET}"))
