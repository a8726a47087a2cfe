"""wordcount with a Python UDF in its tokenizer (tests/sources/test_epoch_tagging.py): Spark hands the lines to a Python
worker in batches, so a catch-up cannot tell a word's epoch by the file it was read from, and reads the
epochs one scan each instead."""

from __future__ import annotations

import re

from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType

import absreplay.api as abs


@F.udf(returnType=ArrayType(StringType()))
def words(line):  # no type hints: they would make it a pandas UDF
    """wordcount's tokens (``absreplay_examples.wordcount``), one line at a time in Python."""
    return [w for w in re.split(r"\W+", line.lower()) if w]


job = abs.Job("words_by_udf", parallelism=2)
(
    job.source("source", abs.TextLines())
    .flat_map("tokenize", lambda lines: lines.select(F.explode(words("line")).alias("word")))
    .key_by("word", str)
    .aggregate("count", count=abs.count())
    .sink("sink", abs.SqlTable("wordcount_counts"))  # wordcount's table: the same words, the same checks
)
