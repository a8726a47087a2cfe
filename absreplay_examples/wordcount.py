"""wordcount (paper section 3.1): text lines -> words -> a count per word -> a SQL table.

Segments named ``*.jsonl`` hold records with ids, one ``{"id", "ts", "line"}``
envelope a line (README, "Sources with record ids"): the job declares it, so
the id store counts a re-landed copy once; other segments are plain text.

Tokenizing: a line is lowercased and split on runs of characters that are not
letters, digits or underscore; empty tokens are dropped (as Flink's WordCount).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import absreplay.api as abs

# Java regex; the same classes as Python's \W with re.UNICODE
NON_WORD = r"[^\p{L}\p{N}_]+"


def tokenize(lines: DataFrame) -> DataFrame:
    words = lines.select(F.explode(F.split(F.lower(F.col("line")), NON_WORD)).alias("word"))
    return words.where(F.col("word") != "")


job = abs.Job("wordcount", description="counts words of text lines (paper section 3.1)", parallelism=2)
(
    job.source("source", abs.TextLines(id_envelope=".jsonl"))
    .flat_map("tokenize", tokenize)
    .key_by("word", str)
    .aggregate("count", count=abs.count())
    .sink("sink", abs.SqlTable("wordcount_counts"))
)
