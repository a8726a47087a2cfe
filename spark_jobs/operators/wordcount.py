"""Wordcount (paper section 3.1): lines -> words -> count per word.

Tokenizing: a line is lowercased and split on runs of characters that are not
letters, digits or underscore; empty tokens are dropped (as Flink's WordCount).

The keyed reduce is one aggregation over the previous state and the epoch's
words together: one shuffle, with partial aggregation before it, and no join.
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
    needs_sequence_numbers = False

    def tokenize(self, records: DataFrame) -> DataFrame:
        words = records.select(F.explode(F.split(F.lower(F.col("line")), NON_WORD)).alias("word"))
        return words.where(F.col("word") != "")

    def step(self, state: DataFrame, records: DataFrame, checkpoint_id: int) -> DataFrame:
        words = self.tokenize(records).select(
            "word", F.lit(1).cast("long").alias("count"), F.lit(checkpoint_id).cast("long").alias("updated")
        )
        return (
            state.unionByName(words)
            .groupBy("word")
            .agg(F.sum("count").alias("count"), F.max("updated").alias("updated"))
        )
