"""A source's lines as records with the columns its format declares (``coordinator.sources.record_formats``).

Text: the column ``line``. JSON lines and CSV: the declared fields, parsed by
Spark (``from_json`` / ``from_csv``) from lines inject already checked, so
every one parses. A ``timestamp`` field is read without a ``timestampFormat`` (a
cast from string: ISO-8601 with or without a zone), a time without a zone in
``SESSION_TIME_ZONE`` whatever the session says: inject's check
(``coordinator.sources.event_time``) reads the same strings as the same instants.
Parquet: the declared columns; a timestamp without a zone becomes an instant in
the session time zone (``spark_jobs.session`` sets it to ``SESSION_TIME_ZONE``).
With source positions (windows and joins need them), each record also has
``_partition`` and ``_seq`` (its offset in the partition).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from coordinator.sources.event_time import SESSION_TIME_ZONE
from coordinator.sources.kafka_source import KafkaSource
from coordinator.sources.record_formats import Csv, JsonLines, ParquetFiles, RecordFormat
from spark_jobs.records.spark_types import spark_schema

POSITION = (StructField("_partition", StringType(), False), StructField("_seq", LongType(), False))


def record_schema(fmt: RecordFormat | KafkaSource, positions: bool) -> StructType:
    if isinstance(fmt, KafkaSource):  # a record is its value, of the declared records' format
        fmt = fmt.records
    if isinstance(fmt, JsonLines | Csv | ParquetFiles):
        fields = list(spark_schema(fmt.fields, nullable=True).fields)
    else:
        fields = [StructField("line", StringType(), True)]
    return StructType(fields + (list(POSITION) if positions else []))


def parse(fmt: RecordFormat | KafkaSource, lines: DataFrame) -> DataFrame:
    """Records from ``lines`` (``line``, and ``partition`` / ``seq`` when read with positions)."""
    if isinstance(fmt, KafkaSource):
        fmt = fmt.records
    positions = [F.col("partition").alias("_partition"), F.col("seq").alias("_seq")] \
        if "seq" in lines.columns else []
    if isinstance(fmt, ParquetFiles):  # read as columns already (``epoch_source.read_parquet_epoch``)
        return lines.select(*[F.col(c).cast(t) for c, t in fmt.fields], *positions)
    if isinstance(fmt, JsonLines):
        parsed = F.from_json(F.col("line"), spark_schema(fmt.fields, nullable=True), {"timeZone": SESSION_TIME_ZONE})
    elif isinstance(fmt, Csv):
        ddl = ", ".join(f"`{c}` {t}" for c, t in fmt.fields)
        # without the CRs that end a CRLF line, as inject checked it (``Csv.problem``)
        line = F.regexp_replace(F.col("line"), r"\r+\z", "")
        parsed = F.from_csv(line, ddl, {"sep": fmt.delimiter, "timeZone": SESSION_TIME_ZONE})
    else:
        return lines.select("line", *positions)
    return lines.select(parsed.alias("r"), *positions).select("r.*", *[c for c in ("_partition", "_seq")
                                                                        if positions])
