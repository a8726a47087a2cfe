"""wordcount declared with weak consistency (seed 003): opt-in, loses records on failure, never
duplicates them (``coordinator.checkpoints.weak``)."""

import absreplay.api as abs
from absreplay_examples.wordcount import tokenize

job = abs.Job("weak_wordcount", description="wordcount, weak consistency", parallelism=2, consistency="weak")
(
    job.source("source", abs.TextLines())
    .flat_map("tokenize", tokenize)
    .key_by("word", str)
    .aggregate("count", count=abs.count())
    .sink("sink", abs.SqlTable("weak_wordcount_counts"))
)
