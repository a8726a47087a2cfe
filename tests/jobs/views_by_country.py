"""A user's job outside the project's packages (found through ABS_JOBS_DIR by the tests).

Two sources: ``views`` (JSON lines: user, page, event time ``ts`` in epoch ms, time on page ``ms``)
and ``users`` (CSV: user,country). Views are joined with their user's country, then counted per
minute, country and page (tumbling event-time windows, watermark = newest view - 30 s); each
window goes once to a PostgreSQL table (``$VIEWS_SQL_URL``) and to a Delta table
(``$VIEWS_DELTA``). Late views are dead letters.
"""

from __future__ import annotations

from pyspark.sql import functions as F

import absreplay.api as abs


def only_real_pages(views):
    return views.where(F.col("page") != "")


job = abs.Job("views_by_country", parallelism=2, description="views and time on page per minute, country, page")
views = job.source("views", abs.json_lines({"user": int, "page": str, "ts": int, "ms": int}, time="ts"))
users = job.source("users", abs.csv({"user": int, "country": str}))
per_minute = (
    views.filter("real_pages", only_real_pages)
    .key_by("user", int)
    .join("enrich", users.key_by("user", int))
    .key_by({"country": str, "page": str})
    .window("per_minute", abs.Tumbling(ms=60_000), time="ts", delay_ms=30_000,
            views=abs.count(), ms=abs.sum("ms"))
)
per_minute.sink("to_postgres", abs.SqlTable("views_per_minute", url="${VIEWS_SQL_URL}"))
per_minute.sink("to_delta", abs.DeltaTable("${VIEWS_DELTA}"))
