"""wordcount (paper section 3.1): text lines -> words -> a count per word -> a SQL table.

Segments named ``*.jsonl`` hold records with ids, one ``{"id", "ts", "line"}``
envelope a line (README, "Sources with record ids"): the job declares it, so
the id store counts a re-landed copy once; other segments are plain text.

Tokenizing: a line is lowercased and split on runs of characters that are not
letters, digits or underscore; empty tokens are dropped (as Flink's WordCount).

``absreplay demo`` runs it on sample text (``sample_data``) and checks its sink against a recount in
plain Python (``recount``): the job brings both as its ``demo``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import absreplay.api as abs
from absreplay_examples.recount import recount
from absreplay_examples.sample_data import land_batch

# Java regex; the same classes as Python's \W with re.UNICODE
NON_WORD = r"[^\p{L}\p{N}_]+"


def tokenize(lines: DataFrame) -> DataFrame:
    words = lines.select(F.explode(F.split(F.lower(F.col("line")), NON_WORD)).alias("word"))
    return words.where(F.col("word") != "")


class SampleText:
    """Skewed sample text in two partitions, and the word counts of a recount (``abs.DemoData``)."""

    def land(self, input_dir: Path, batch: int, records: int) -> int:
        return land_batch(input_dir, batch, records // 2)  # a segment in each of the two partitions

    def reference(self, input_dir: Path, cut: Mapping[str, int]) -> Counter[str]:
        return recount(input_dir, dict(cut))


job = abs.Job("wordcount", description="counts words of text lines (paper section 3.1)", parallelism=2,
              demo=SampleText())
(
    job.source("source", abs.TextLines(id_envelope=".jsonl"))
    .flat_map("tokenize", tokenize)
    .key_by("word", str)
    .aggregate("count", count=abs.count())
    .sink("sink", abs.SqlTable("wordcount_counts"))
)
