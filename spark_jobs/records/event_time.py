"""A record's event time as epoch milliseconds, whatever type its column has.

Operators on event time (windows, sessions, interval joins, the watermark) call ``event_ms``
and never cast the column themselves: a ``long`` column is epoch ms already, a ``timestamp``
column (Parquet timestamps, ISO-8601 strings read with a declared timestamp type) becomes its
epoch ms in UTC, as Spark's ``unix_millis`` says.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampNTZType, TimestampType


def event_ms(df: DataFrame, name: str) -> Column:
    """Column ``name`` of ``df`` as epoch milliseconds (a ``long``)."""
    kind = df.schema[name].dataType
    if isinstance(kind, TimestampType | TimestampNTZType):
        return F.unix_millis(F.col(name).cast("timestamp"))
    return F.col(name).cast("long")
