"""Wordcount (paper section 3.1): lines -> words -> count per word.

Tokenizing: a line is lowercased and split on runs of characters that are not
letters, digits or underscore; empty tokens are dropped (as Flink's WordCount).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

# Java regex; the same classes as Python's \W with re.UNICODE
NON_WORD = r"[^\p{L}\p{N}_]+"


class WordcountOperators:
    state_schema = StructType(
        [
            StructField("word", StringType(), False),
            StructField("count", LongType(), False),
            StructField("updated", LongType(), False),
        ]
    )
    key = "word"
    sink_columns = ("word", "count")

    def tokenize(self, records: DataFrame) -> DataFrame:
        words = records.select(F.explode(F.split(F.lower(F.col("line")), NON_WORD)).alias("word"))
        return words.where(F.col("word") != "")

    def step(self, state: DataFrame, records: DataFrame, checkpoint_id: int) -> DataFrame:
        delta = self.tokenize(records).groupBy("word").agg(F.count(F.lit(1)).alias("delta"))
        joined = state.join(delta, "word", "full_outer")
        changed = F.col("delta").isNotNull()
        return joined.select(
            "word",
            (F.coalesce(F.col("count"), F.lit(0)) + F.coalesce(F.col("delta"), F.lit(0))).alias("count"),
            F.when(changed, F.lit(checkpoint_id)).otherwise(F.col("updated")).cast("long").alias("updated"),
        )
