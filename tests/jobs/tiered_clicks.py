"""A lookup join that emits a record again when its row changes (tests/operators/test_reemit.py runs it;
tests/reemit_data.py lands its input and recomputes its sinks in plain Python): clicks (JSON lines: id,
user, page) joined with their user's tier (CSV: user,tier), whose rows change in later batches. Into a SQL
table and a Parquet directory, both upserted by the click's id: each holds every click with its user's
current tier."""

import absreplay.api as abs

COLUMNS = {"id": str, "user": str, "page": str, "tier": str}

job = abs.Job("tiered_clicks", parallelism=2, description="clicks with their user's current tier")
clicks = job.source("clicks", abs.json_lines({"id": str, "user": str, "page": str}))
tiers = job.source("tiers", abs.csv({"user": str, "tier": str}))
with_tier = clicks.key_by("user", str).join("with_tier", tiers.key_by("user", str), reemit=True)
with_tier.sink("to_sql", abs.SqlTable("tiered_clicks"), columns=COLUMNS, key="id")
with_tier.sink("to_parquet", abs.ParquetDirectory("${TIERED_PARQUET}"), columns=COLUMNS, key="id")
