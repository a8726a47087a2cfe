"""A job reading Parquet segment files (tests/sources/test_parquet_source.py runs it): a count and a sum of
``v`` per ``k`` into the catalog database."""

import absreplay.api as abs

job = abs.Job("parquet_totals", parallelism=2, description="count and sum per key of Parquet rows")
(
    job.source("rows", abs.parquet({"k": str, "v": int}))
    .key_by("k", str)
    .aggregate("totals", n=abs.count(), total=abs.sum("v"))
    .sink("out", abs.SqlTable("parquet_totals"))
)
