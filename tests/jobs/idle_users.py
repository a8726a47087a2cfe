"""A job whose keyed state has a TTL in epochs (found through ABS_JOBS_DIR by tests/operators/test_state_ttl_job.py).

Clicks as JSON lines (user, n, event time ts in epoch ms). Per user:

- ``per_user``: how many clicks and their sum, dropped once a user has had no click for two epochs
  (``ttl_epochs=2``); a later click starts the user again from nothing. Into a SQL table and a Parquet
  directory at ``$IDLE_PARQUET``.
- ``streak``: a process function counting the epochs in a row with a click of the user, and the
  largest ``n`` of the newest such epoch; with ``ttl_epochs=1`` an epoch without a click drops the user,
  so the count starts again at 1. Into a SQL table.
- ``recent``: clicks counted in event time, dropped once the user's newest click is 2.5 s or more behind
  the operator's watermark (``ttl_ms=2500``); ``visits``: the same as a process function with
  ``ttl_ms=1500``. Each into a SQL table.
"""

from __future__ import annotations

from pyspark.sql import functions as F

import absreplay.api as abs


def streak(state, clicks):
    """The touched users' rows: one more epoch in a row than the state says (1 for a user it does not hold)."""
    newest = clicks.groupBy("user").agg(F.max("n").alias("newest"))
    return newest.join(state, "user", "left").select(
        "user", (F.coalesce(F.col("epochs"), F.lit(0)) + 1).alias("epochs"), F.col("newest").alias("peak"))


# four checkpoints retained: tests rewind six epochs to the third
def visits(state, clicks):
    """The touched users' clicks so far (the state's, if it holds the user, and the epoch's)."""
    more = clicks.groupBy("user").agg(F.count(F.lit(1)).alias("more"))
    return more.join(state, "user", "left").select(
        "user", (F.coalesce(F.col("clicks"), F.lit(0)) + F.col("more")).cast("int").alias("clicks"))


job = abs.Job("idle_users", parallelism=2, description="per-user clicks, forgotten after idle epochs",
              policy=abs.CheckpointPolicy(retained=4))
users = job.source("clicks", abs.json_lines({"user": str, "n": int, "ts": int})).key_by("user", str)
per_user = users.aggregate("per_user", ttl_epochs=2, clicks=abs.count(), total=abs.sum("n"))
per_user.sink("to_sql", abs.SqlTable("idle_per_user"))
per_user.sink("to_parquet", abs.ParquetDirectory("${IDLE_PARQUET}"))
users.process("streak", streak, state={"epochs": int, "peak": int}, ttl_epochs=1).sink(
    "streak_sql", abs.SqlTable("idle_streaks"))
users.aggregate("recent", ttl_ms=2500, time="ts", clicks=abs.count()).sink("recent_sql", abs.SqlTable("idle_recent"))
users.process("visits", visits, state={"clicks": int}, ttl_ms=1500, time="ts").sink(
    "visits_sql", abs.SqlTable("idle_visits"))
