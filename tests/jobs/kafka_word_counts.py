"""A job whose sinks are Kafka topics (tests/servers/test_kafka_sink.py runs it): text lines -> words; every
word appended to ``words`` and a count per word upserted into ``word-counts``, both on ``$KAFKA_BOOTSTRAP``."""

import absreplay.api as abs
from absreplay_examples.wordcount import tokenize

job = abs.Job("kafka_word_counts", parallelism=2, description="words and counts per word, to Kafka")
words = job.source("source", abs.TextLines()).flat_map("tokenize", tokenize)
words.sink("words_out", abs.KafkaTopic("words", "${KAFKA_BOOTSTRAP}"), columns={"word": str})
words.key_by("word", str).aggregate("count", count=abs.count()).sink(
    "counts_out", abs.KafkaTopic("word-counts", "${KAFKA_BOOTSTRAP}"))
