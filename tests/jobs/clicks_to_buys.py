"""An interval join of two streams (tests/operators/test_interval_join.py runs it; tests/joins_data.py lands its input
and recomputes its sink in plain Python): clicks (JSON lines: id, user, event time ``ts`` in epoch ms, page)
and buys (JSON lines: id, user, ``ts``, amount), joined per user when a buy is at most 20 s before a click
or 10 s after it (a click at ta, a buy at tb: tb - 10 s <= ta <= tb + 20 s). The watermark is the older of
both streams' newest event times minus 5 s; a click no buy matched is emitted once with nulls when the
watermark passes it. Records behind the watermark are dead letters of the join."""

import absreplay.api as abs

LOWER_MS, UPPER_MS, DELAY_MS = 10_000, 20_000, 5_000

job = abs.Job("clicks_to_buys", parallelism=2, description="clicks and the buys near them, per user")
clicks = job.source("clicks", abs.json_lines({"id": str, "user": str, "ts": int, "page": str}, time="ts"))
buys = job.source("buys", abs.json_lines({"id": str, "user": str, "ts": int, "amount": int}, time="ts"))
(clicks.key_by("user", str)
    .interval_join("near", buys.key_by("user", str), time="ts", lower_ms=LOWER_MS, upper_ms=UPPER_MS,
                   how="left", delay_ms=DELAY_MS)
    .sink("to_sql", abs.SqlTable("clicks_to_buys"),
          columns={"user": str, "id": str, "ts": int, "page": str, "id_right": str, "ts_right": int,
                   "amount": int}))
