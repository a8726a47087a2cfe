"""page_views: page views joined with a users stream, counted per 5 minutes, country and page.

Two sources, JSON lines each: ``views`` ({"user", "page", "ts"}: event time in
epoch ms) and ``users`` ({"user", "country"}). The join keeps each user's
latest row and lets a view wait until its user is known; the window counts
views per (country, page) in 5-minute tumbling windows of event time, emitted
once the watermark (the newest view minus one minute) passes a window's end.
A view that arrives after its window was emitted is a dead letter. Results go
to a table in PostgreSQL (``$PAGE_VIEWS_SQL_URL``, default the catalog
database) and to a Delta table (``$PAGE_VIEWS_DELTA``, default under
``$ABS_HOME``).
"""

from __future__ import annotations

import absreplay.api as abs

job = abs.Job("page_views", parallelism=2,
              description="page views per 5 minutes, country and page (views joined with users)")
views = job.source("views", abs.json_lines({"user": int, "page": str, "ts": int}, time="ts"))
users = job.source("users", abs.json_lines({"user": int, "country": str}))
per_page = (
    views.key_by("user", int)
    .join("with_country", users.key_by("user", int))
    .key_by({"country": str, "page": str})
    .window("per_5_minutes", abs.Tumbling(minutes=5), time="ts", delay_ms=60_000, views=abs.count())
)
per_page.sink("to_postgres", abs.SqlTable("page_views_per_5_minutes", url="${PAGE_VIEWS_SQL_URL:-}"))
per_page.sink("to_delta", abs.DeltaTable("${PAGE_VIEWS_DELTA:-${ABS_HOME:-.absreplay}/delta/page_views}"))
