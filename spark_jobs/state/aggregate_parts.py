"""A built-in aggregate's state columns as Spark expressions: what a record contributes to each and the
function that folds them. DataFrame state and the stores' shuffle read the same columns."""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from coordinator.dataflow.compile import hidden
from spark_jobs.records.spark_types import spark_type


def parts(name: str, agg: Any) -> list[tuple[str, Column, Any]]:
    """(state column, a record's contribution, the aggregate that folds them) of one aggregate."""
    t = spark_type(agg.type)
    one = F.lit(1).cast("long")
    if agg.kind == "count":
        return [(name, one, F.sum)]
    if agg.kind == "mean":
        return [(hidden(name, "sum"), F.col(agg.column).cast("double"), F.sum), (hidden(name, "count"), one, F.sum),
                (name, F.lit(None).cast("double"), F.first)]
    if agg.kind == "combine":
        return [(name, agg.value().cast(t), agg.merge)]
    merge = {"sum": F.sum, "min": F.min, "max": F.max}[agg.kind]
    return [(name, F.col(agg.column).cast(t), merge)]
