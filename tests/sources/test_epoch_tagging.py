"""A catch-up of a job read as plain lines scans all its pending epochs' files at once, and tells a record's
epoch by the file it came from (``epoch_source.epoch_of_file``): valid only where the stream into the keyed
aggregate is computed row by row in the scan's task (``epoch_source.keeps_input_file``); elsewhere it reads
the epochs one scan each. Both leave the same snapshots and sinks, and what plain Python counts."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import functions as F

from coordinator.dataflow.discovery import get_job
from absreplay_examples.wordcount import tokenize
from coordinator.catalog.db import upgrade
from coordinator.catalog.models import SourceSegment
from coordinator.sources.record_formats import TextLines
from spark_jobs.operators import dataflow
from spark_jobs.records import epoch_source
from spark_jobs.records.epoch_source import epoch_of_file, keeps_input_file, read_lines
from spark_jobs.records.xxh64 import spark_xxhash64
from tests.helpers import JOBS_DIR, make_workspace

pytestmark = pytest.mark.spark
JOBS = str(JOBS_DIR)


def segments(input_dir: Path, epochs: dict[int, list[str]]) -> list[tuple[int, list[SourceSegment]]]:
    """Epoch -> lines, one segment file per line, in partitions p0 and p1 by turns."""
    out = []
    for c, lines in epochs.items():
        mine = []
        for i, line in enumerate(lines):
            seg = SourceSegment(partition=f"p{i % 2}", name=f"seg-{c:04d}-{i}", first_offset=0, records=1)
            (input_dir / seg.partition).mkdir(parents=True, exist_ok=True)
            (input_dir / seg.partition / seg.name).write_text(line + "\n")
            mine.append(seg)
        out.append((c, mine))
    return out


def test_each_record_gets_the_epoch_of_its_file(tmp_path, spark) -> None:
    epochs = segments(tmp_path, {3: ["a b", "c"], 4: ["d e f"], 7: ["g", "h i", "j"]})
    lines = read_lines(spark, tmp_path, [s for _, segs in epochs for s in segs], TextLines())
    stream = tokenize(lines)
    epoch_of, files = epoch_of_file(tmp_path, epochs)
    assert keeps_input_file(stream, files)
    tagged = stream.withColumn("epoch", epoch_of)
    assert sorted((r.word, r.epoch) for r in tagged.collect()) == [
        ("a", 3), ("b", 3), ("c", 3), ("d", 4), ("e", 4), ("f", 4), ("g", 7), ("h", 7), ("i", 7), ("j", 7)]


def test_a_path_spark_would_percent_encode_is_not_tagged(tmp_path) -> None:
    epochs = segments(tmp_path / "with space", {1: ["a"]})
    assert epoch_of_file(tmp_path / "with space", epochs) is None
    assert epoch_of_file(tmp_path, [(1, [SourceSegment(partition="p0", name="seg+1", first_offset=0, records=1)])]) is None


def test_files_are_looked_up_by_the_hash_spark_computes(spark) -> None:
    """``epoch_of_file`` hashes the file names in Python; the records' files are hashed by Spark."""
    names = [""] + ["".join(chr(97 + (i * j) % 26) for j in range(n)) for i, n in enumerate(range(1, 120))]
    names += ["file:///tmp/input/wordcount/p0/seg-000001.txt", "é ü 字"]
    spark_hashes = spark.createDataFrame([(x,) for x in names], "s string").select(F.xxhash64("s")).collect()
    assert [spark_xxhash64(x) for x in names] == [r[0] for r in spark_hashes]


def test_files_that_hash_alike_are_not_tagged(tmp_path, monkeypatch) -> None:
    epochs = segments(tmp_path, {1: ["a"], 2: ["b"]})
    assert epoch_of_file(tmp_path, epochs) is not None
    monkeypatch.setattr(epoch_source, "spark_xxhash64", len)  # names of one length hash alike
    assert epoch_of_file(tmp_path, epochs) is None


def test_only_row_by_row_streams_of_the_epochs_files_keep_the_input_file(tmp_path, spark) -> None:
    epochs = segments(tmp_path, {1: ["a b"]})
    words = tokenize(read_lines(spark, tmp_path, epochs[0][1], TextLines()))
    files = epoch_of_file(tmp_path, epochs)[1]
    assert keeps_input_file(words.where(F.length("word") > 0).withColumn("n", F.lit(1)), files)
    assert keeps_input_file(words.unionByName(words), files)
    for not_row_by_row in (words.select(F.udf(str.upper, "string")("word").alias("word")), words.groupBy("word").count(),
                           words.distinct(), words.limit(1), words.repartition(2),
                           words.join(words.withColumnRenamed("word", "w"), F.col("word") == F.col("w"))):
        assert not keeps_input_file(not_row_by_row, files)
    # rows from elsewhere would belong to no epoch: a file of the user's own, rows made in the driver
    (tmp_path / "extra.txt").write_text("z\n")
    extra = spark.read.text(str(tmp_path / "extra.txt")).select(F.col("value").alias("word"))
    assert not keeps_input_file(words.unionByName(extra), files)
    assert not keeps_input_file(words.unionByName(spark.createDataFrame([("z",)], "word string")), files)
    assert not keeps_input_file(words, files - {next(iter(files))})


@pytest.mark.heavy(seconds=20)
def test_a_catch_up_tags_by_file_where_it_can_and_scans_each_epoch_where_not(tmp_path, spark, monkeypatch) -> None:
    seen = []

    def spy(df, files):
        seen.append(keeps_input_file(df, files))
        return seen[-1]

    monkeypatch.setattr(dataflow, "keeps_input_file", spy)
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    acks = {}
    for job, tagged_by_file in ((None, True), (get_job("words_by_udf"), False)):
        url = f"sqlite:///{tmp_path / f'{tagged_by_file}.db'}"
        upgrade(url)
        ws = make_workspace(tmp_path / str(tagged_by_file), url, job, jobs_dir=JOBS)
        for batch in range(4):
            ws.land(batch, lines=150)
            ws.coordinator.inject()
        seen.clear()
        report = ws.run_epochs(spark)
        ws.coordinator.finalize()
        assert seen == [tagged_by_file] and not report.failed
        table = ws.job.sinks[0].target(url).read()
        counts = dict(zip(table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True))
        assert counts == ws.expected_latest()  # plain Python (absreplay_examples.recount)
        acks[tagged_by_file] = {(a.checkpoint_id, a.subtask): (a.state_rows, a.checksum, a.base_checkpoint_id)
                                for a in ws.store.all_acks(ws.job.name) if a.operator == "count"}
    # the same words into the same subtasks: the same snapshots, whichever way the epochs were read
    assert acks[True] == acks[False] and len(acks[True]) == 8


def test_records_of_no_epoch_of_the_group_fail_the_apply_rather_than_vanish(tmp_path, spark) -> None:
    """``stores.apply.aggregate`` merges each key's epochs in one row: a record tagged with no epoch of the
    group (a file ``epoch_of_file`` did not list) still reaches the store's apply, which refuses it."""
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError

    from absreplay_examples.definitions import wordcount
    from spark_jobs.operators.dataflow import dataflow_of
    from spark_jobs.state.backend import EPOCH, RestorePoint
    from spark_jobs.state.stores.apply import aggregate
    from spark_jobs.state.stores.provider import StoreBackend

    job = wordcount()
    node = dataflow_of(job).nodes["count"]
    backend = StoreBackend(spark, job, dataflow_of(job).nodes, str(tmp_path / "state"), 128, "t")
    state = backend.open(RestorePoint(None, {}, None, False, {}, lambda op: None))["count"]
    words = spark.createDataFrame([("a", 1), ("b", 2), ("a", 2), ("c", None), ("d", 9)], f"word string, {EPOCH} long")
    applied = aggregate(spark, state, [1, 2], words.where(F.col(EPOCH).isin(1, 2)), node)
    assert [r["rows_0"] + r["rows_1"] for r in (s.written["metrics"] for s in applied)] == [1, 2]
    # the store is told that some records had no epoch of [3, 4] (which one, the merged row does not keep)
    with pytest.raises((PySparkException, Py4JJavaError), match=r"contributions of epochs \[None\] given to epochs \[3, 4\]"):
        aggregate(spark, applied[-1], [3, 4], words, node)
