"""Kafka source benchmark: the wordcount job reading a Kafka topic, against Spark Structured Streaming
reading the same topic, in one run.

    python bench/kafka_bench.py [--epochs 5] [--records-per-epoch 200000] [--vocab 50000] [--repeat 2]
    python bench/kafka_bench.py --quick      # tiny sizes: checks that it runs

Setup (not timed): one Kafka broker (``tests/servers/kafka.py``: Apache Kafka 4.1 in KRaft mode, one node on
the loopback, on the same two cores), a topic ``words`` of 2 partitions, and one local[2] SparkSession
(parallelism 2) with Spark's Kafka connector on ``spark.jars`` (``.jvm/spark.classpath``, from a
``SPARK_CONF_DIR`` as tests/servers/test_kafka_jobs.py gives it). Each epoch's records are produced with
confluent-kafka (not timed): wordcount_bench's text (``absreplay_examples.sample_data``, 5 words a line on
average, a ``--vocab``-word vocabulary), one line a record, half of them to each partition. A warm-up on a
topic of its own (2 epochs one per run, both sides) comes first and is not measured.

Both sides run the wordcount job (``absreplay_examples.wordcount``'s tokenizer, a count per word, a SQLite
table of the counts) in the one session:
  ours       the job declared here on ``abs.kafka("words", records=abs.TextLines())`` (flat_map tokenize,
             key_by word, aggregate count, SqlTable sink), in-process ``EpochRunner`` runs with async
             snapshots, each with its own catalog and state root (``bench.kit.catalog``). Inject registers
             every partition's last stable offset as the barrier's cut; a run reads each epoch's exact offset
             range (``spark_jobs.records.kafka_epochs``, read_committed).
  Spark SS   the same job in Structured Streaming: ``readStream.format("kafka")``, subscribe ``words``,
             startingOffsets earliest, kafka.isolation.level read_committed -> the value as the line -> the
             same tokenizer -> groupBy count, update mode; RocksDB state store with changelog checkpointing
             (``bench.ss_anchor.SS_STORES["rocksdb"]``); a foreachBatch sink doing our sink's work
             (``bench.ss_anchor.SqliteUpsertSink``: the batch's counts upserted in key order, with the batch id
             as commit record, in one transaction); Trigger.AvailableNow from its checkpoint.

Scenarios, timed as wordcount_bench times them:
  per-epoch  E epochs; for each, its records produced, then the two sides in turns (which goes first
             alternates epoch by epoch): ours: inject (a barrier), then one processing run (restore,
             process, snapshot) and its finalize (the sink commit): the per-epoch figure is the run +
             finalize, as wordcount_bench's, whose per-epoch figure leaves landing and inject out; inject
             is timed apart and reported, with a second ratio that counts it. SS: one AvailableNow run from
             its checkpoint (its figure: the whole query, from building it to its end, which includes its own
             offset discovery, ``latestOffset``, our inject's counterpart).
  catch-up   ours: --repeat catalogs of their own, each injecting a barrier after every epoch produced (during
             the per-epoch scenario; those injects are not timed), then one processing run of the E epochs and
             its finalize. SS: a fresh checkpoint and sink, one AvailableNow run over the whole topic (one
             batch). The two take turns --repeat times; each keeps its median.
Every run is profiled (``bench.kit.spark_profile``: Spark jobs, stages, their wall time, catalog statements;
taken outside the timed part) to tell where an epoch's time goes. The final counts of every scenario (ours
per epoch and each catch-up, SS per epoch and each catch-up) must be equal, and equal to a plain-Python count
of the records produced (``absreplay_examples.recount.tokenize``).

Ratios, with the project's goal where there is one (the output says whether it is met):
  per_epoch_over_ss              median per-epoch run (run + finalize) / median SS run     goal <= 0.7
  per_epoch_with_inject_over_ss  the same with our inject counted
  last_epoch_over_ss             the last epoch's, where the state is largest
  catch_up_over_ss               catch-up (median) / SS catch-up (median)
Prints two tables and the ratios, and writes bench/results/kafka.json.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import absreplay.api as abs  # noqa: E402
from absreplay_examples.recount import tokenize as recount_tokenize  # noqa: E402
from absreplay_examples.sample_data import lines as sample_lines  # noqa: E402
from absreplay_examples.sample_data import vocabulary  # noqa: E402
from absreplay_examples.wordcount import tokenize  # noqa: E402
from bench import wordcount_bench  # noqa: E402
from bench.kit import options  # noqa: E402
from bench.kit.catalog import WordcountCatalog  # noqa: E402
from bench.kit.repetitions import summarize, turns  # noqa: E402
from bench.kit.spark_profile import RunProfile  # noqa: E402
from bench.ss_anchor import SS_STORES, SqliteUpsertSink, digest, du  # noqa: E402
from bench.synthetic_bench import machine  # noqa: E402
from coordinator.dataflow.jobs import JobDefinition  # noqa: E402
from coordinator.settings import Settings  # noqa: E402

console = Console(width=150)
TOPIC = "words"
PARTITIONS = 2
SIDES = ("ours", "ss")
GOALS = {"per_epoch_over_ss": 0.7}


def kafka_wordcount(bootstrap: str, topic: str = TOPIC) -> JobDefinition:
    """absreplay_examples.wordcount on a Kafka topic: its tokenizer, its count per word, its SqlTable sink."""
    job = abs.Job("kafka_wordcount", description="counts words of text lines read from Kafka", parallelism=2)
    (
        job.source("source", abs.kafka(topic, bootstrap_servers=bootstrap, records=abs.TextLines()))
        .flat_map("tokenize", tokenize)
        .key_by("word", str)
        .aggregate("count", count=abs.count())
        .sink("sink", abs.SqlTable(wordcount_bench.SINK_TABLE))
    )
    return job.definition("bench.kafka_bench")


class Scenario(wordcount_bench.Scenario):
    """A fresh catalog and state root for the Kafka job; its runs, counts and state as wordcount_bench's."""

    def __init__(self, root: Path, job: JobDefinition) -> None:
        self.root = root
        WordcountCatalog.__init__(self, Settings.from_env({"ABS_HOME": str(root)}), job)

    def inject(self) -> float:
        t0 = time.perf_counter()
        self.coordinator.inject()
        return time.perf_counter() - t0


class KafkaStructuredStreaming:
    """The wordcount job in Spark SS on the topic, RocksDB + changelog: its own checkpoint and SQLite sink."""

    def __init__(self, base: Path, bootstrap: str, topic: str = TOPIC) -> None:
        self.bootstrap, self.topic, self.checkpoint = bootstrap, topic, base / "checkpoint"
        base.mkdir(parents=True)
        self.sink = SqliteUpsertSink(base / "sink.db")
        self.runs: list[dict] = []

    def run(self, spark) -> dict:
        """One AvailableNow run from the checkpoint: every record produced since the last one."""
        from pyspark.sql import functions as F

        for key, value in SS_STORES["rocksdb"].items():
            spark.conf.set(key, value)
        t0 = time.perf_counter()
        records = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", self.bootstrap)
                   .option("subscribe", self.topic).option("startingOffsets", "earliest")
                   .option("kafka.isolation.level", "read_committed").load())
        counts = tokenize(records.select(F.col("value").cast("string").alias("line"))).groupBy("word").count()
        query = (counts.writeStream.outputMode("update").foreachBatch(self.sink)
                 .option("checkpointLocation", str(self.checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - t0
        progress = query.recentProgress
        run = {"run_s": elapsed, "total_s": elapsed, "batches": [dict(p["durationMs"]) for p in progress],
               "input_rows": [p["numInputRows"] for p in progress]}
        self.runs.append(run)
        return run

    def state_files(self) -> dict[str, int]:
        found = Counter(p.suffix for p in (self.checkpoint / "state").rglob("*") if p.is_file())
        return dict(sorted(found.items()))

    def counts(self) -> dict[str, int]:
        return self.sink.counts()


class Topic:
    """The benchmark's records: epoch ``b``'s lines of partition ``p`` as land_batch makes them (seeded), produced
    to ``topic``; a plain-Python count of every word produced, the reference."""

    def __init__(self, broker, topic: str, records_per_epoch: int, vocab: int) -> None:
        self.topic, self.per_partition, self.vocab = topic, records_per_epoch // PARTITIONS, vocabulary(vocab)
        broker.create_topic(topic, partitions=PARTITIONS)
        self.producer = broker.producer(**{"linger.ms": 20, "batch.num.messages": 10_000,
                                           "queue.buffering.max.messages": 1_000_000,
                                           "queue.buffering.max.kbytes": 1_048_576})
        self.reference: Counter[str] = Counter()
        self.records = 0

    def produce(self, epoch: int, seed: int = 42) -> float:
        """Epoch ``epoch``'s records produced and acknowledged; the seconds it took."""
        errors: list[str] = []

        def delivered(err, msg) -> None:  # noqa: ANN001 - confluent-kafka's callback
            if err is not None:
                errors.append(str(err))

        t0 = time.perf_counter()
        for p in range(PARTITIONS):
            rng = random.Random(f"{seed}-{epoch}-{p}")
            for i, line in enumerate(sample_lines(rng, self.vocab, self.per_partition, words_per_line=5)):
                self.reference.update(recount_tokenize(line))
                while True:
                    try:
                        self.producer.produce(self.topic, line.encode("utf-8"), partition=p, on_delivery=delivered)
                        break
                    except BufferError:  # the local queue is full: let it drain
                        self.producer.poll(0.05)
                if i % 10_000 == 0:
                    self.producer.poll(0)
        left = self.producer.flush(120)
        assert left == 0 and not errors, f"producing epoch {epoch}: {left} not delivered, errors {errors[:3]}"
        self.records += PARTITIONS * self.per_partition
        return time.perf_counter() - t0

    def close(self) -> None:
        """The producer gone while the broker is up (else it logs its reconnects once the broker stops)."""
        self.producer = None


def profiled(spark, engine, run):
    """``run()``'s result, with where its time went (``RunProfile.breakdown``) under ``profile``."""
    with RunProfile(spark, engine) as profile:
        result = run()
    result["profile"] = profile.breakdown(epochs=1)
    return result


def spark_conf_dir(base: Path) -> Path:
    """A SPARK_CONF_DIR whose spark-defaults.conf puts Spark's Kafka connector on spark.jars."""
    from tests.servers.jvm_deps import classpath

    conf = base / "spark-conf"
    conf.mkdir(parents=True)
    (conf / "spark-defaults.conf").write_text(f"spark.jars {classpath('spark').replace(':', ',')}\n")
    return conf


def warm_up(spark, broker, base: Path, records_per_epoch: int, vocab: int) -> None:
    """Both sides, two epochs one per run, on a topic of their own (not measured)."""
    topic = Topic(broker, "warm-up", records_per_epoch, vocab)
    ours = Scenario(base / "warm-up-ours", kafka_wordcount(broker.bootstrap, "warm-up"))
    ss = KafkaStructuredStreaming(base / "warm-up-ss", broker.bootstrap, "warm-up")
    for b in range(2):
        topic.produce(b)
        ours.inject()
        ours.run(spark, "async", max_epochs=1)
        ss.run(spark)
    assert ours.counts() == ss.counts() == dict(topic.reference), "warm-up: the two sides' counts differ"
    ours.engine.dispose()
    topic.close()


def summary_of(runs: list[dict], key: str) -> dict:
    """The median per-epoch breakdown over ``runs``' profiles (a few of its fields)."""
    # (the breakdown's own ``wall_s`` is its stages' wall time again: the run's is the run's ``total_s``)
    fields = ("spark_jobs", "stages", "tasks", "stages_wall_s", "run_s", "gc_s", "catalog_statements",
              "catalog_s", "driver_other_s")
    return {f: statistics.median(r[key].get(f, 0.0) for r in runs) for f in fields}


def ratios(results: dict) -> dict[str, float]:
    ours, ss = results["per_epoch"]["ours"], results["per_epoch"]["ss"]
    with_inject = [i + r for i, r in zip(ours["inject_s"], ours["run_s"], strict=True)]
    cu = results["catch_up"]
    return {
        "per_epoch_over_ss": statistics.median(ours["run_s"]) / statistics.median(ss["run_s"]),
        "per_epoch_with_inject_over_ss": statistics.median(with_inject) / statistics.median(ss["run_s"]),
        "last_epoch_over_ss": ours["run_s"][-1] / ss["run_s"][-1],
        "catch_up_over_ss": cu["ours"]["median_total_s"] / cu["ss"]["median_total_s"],
    }


def med(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def batch_ms(runs: list[dict], key: str) -> list[float]:
    """SS's own timing ``key`` (durationMs) of every batch of ``runs``, in seconds."""
    return [b.get(key, 0) / 1000 for r in runs for b in r["batches"]]


def print_tables(results: dict, title: str) -> None:
    ours, ss = results["per_epoch"]["ours"], results["per_epoch"]["ss"]
    table = Table(title=f"one epoch per run ({results['epochs']} runs, medians): {title}")
    for col in ("", "ABS Replay (async), Kafka source", "Spark SS, Kafka, RocksDB + changelog"):
        table.add_column(col, justify="right")
    table.add_row("run s (ours: run + finalize)", med(ours["run_s"]), med(ss["run_s"]))
    table.add_row("run s, epochs 1..E", " ".join(f"{s:.2f}" for s in ours["run_s"]),
                  " ".join(f"{s:.2f}" for s in ss["run_s"]))
    table.add_row("inject s (not in run s) / SS latestOffset s", med(ours["inject_s"]),
                  med(batch_ms(ss["runs"], "latestOffset")))
    table.add_row("restore s", med([r["restore_s"] for r in ours["runs"]]), "")
    table.add_row("epoch s / SS triggerExecution s", med([s for r in ours["runs"] for s in r["epoch_s"]]),
                  med(batch_ms(ss["runs"], "triggerExecution")))
    table.add_row("SS addBatch s (the batch's Spark job and sink)", "", med(batch_ms(ss["runs"], "addBatch")))
    table.add_row("finalize s", med([r["finalize_s"] for r in ours["runs"]]), "")
    po, ps = ours["profile"], ss["profile"]
    table.add_row("Spark jobs / stages", f"{po['spark_jobs']:.0f} / {po['stages']:.0f}",
                  f"{ps['spark_jobs']:.0f} / {ps['stages']:.0f}")
    table.add_row("stages' wall s / executor run s", f"{po['stages_wall_s']:.2f} / {po['run_s']:.2f}",
                  f"{ps['stages_wall_s']:.2f} / {ps['run_s']:.2f}")
    table.add_row("catalog statements (s)", f"{po['catalog_statements']:.0f} ({po['catalog_s']:.2f})", "")
    table.add_row("driver s outside stages and catalog", f"{po['driver_other_s']:.2f}", f"{ps['driver_other_s']:.2f}")
    table.add_row("state / checkpoint MB", f"{ours['state_bytes'] / 1e6:.1f}", f"{ss['checkpoint_bytes'] / 1e6:.1f}")
    table.add_row("state files", "", ", ".join(f"{n} {k or 'other'}" for k, n in ss["state_files"].items()))
    console.print(table)

    cu, records = results["catch_up"], results["records"]
    table = Table(title=f"catch-up ({results['epochs']} epochs in one run, median of {results['repeat']}): {title}")
    for col in ("", "ABS Replay (async), Kafka source", "Spark SS, Kafka, RocksDB + changelog"):
        table.add_column(col, justify="right")
    o, s = cu["ours"], cu["ss"]
    table.add_row("total s (median)", f"{o['median_total_s']:.2f}", f"{s['median_total_s']:.2f}")
    table.add_row("records/s", f"{o['records_per_s']:,.0f}", f"{s['records_per_s']:,.0f}")
    table.add_row("restore s", f"{o['restore_s']:.2f}", "")
    table.add_row("epochs + snapshots s / SS triggerExecution s", f"{o['process_s'] - o['restore_s']:.2f}",
                  med(batch_ms([s], "triggerExecution")))
    table.add_row("finalize s", f"{o['finalize_s']:.2f}", "")
    table.add_row("Spark jobs / stages", f"{o['profile']['spark_jobs']:.0f} / {o['profile']['stages']:.0f}",
                  f"{s['profile']['spark_jobs']:.0f} / {s['profile']['stages']:.0f}")
    table.add_row("stages' wall s / driver s outside them", f"{o['profile']['stages_wall_s']:.2f} / "
                  f"{o['profile']['driver_other_s']:.2f}", f"{s['profile']['stages_wall_s']:.2f} / "
                  f"{s['profile']['driver_other_s']:.2f}")
    table.add_row("all totals s", " ".join(f"{t:.2f}" for t in o["all_total_s"]),
                  " ".join(f"{t:.2f}" for t in s["all_total_s"]))
    console.print(table)
    console.print("ours: run s = the processing run + its finalize; inject (the barrier: reading each partition's "
                  "last stable offset) apart. SS: run s = the whole AvailableNow query, from building it to its end "
                  f"(its offset discovery included). {records:,} records.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args = options.parse_epochs(ap, "kafka", 5, "records", 200_000, "catch-up repetitions per side")

    from spark_jobs.session import build_session
    from tests.servers.kafka import kafka_broker

    base = Path(tempfile.mkdtemp(prefix="abs-bench-kafka-"))
    os.environ["SPARK_CONF_DIR"] = str(spark_conf_dir(base))
    started, load_before = time.perf_counter(), os.getloadavg()
    console.print(f"Kafka broker and Spark in {base}")
    with kafka_broker(base / "kafka") as broker:
        spark = build_session("abs-bench-kafka", 2, "local[2]")
        try:
            console.print("warming up the JVM (both sides, two epochs on a topic of their own; not measured)")
            warm_up(spark, broker, base, args.records_per_epoch, args.vocab)
            results: dict = {"records_per_epoch": args.records_per_epoch, "epochs": args.epochs, "vocab": args.vocab,
                             "repeat": args.repeat, "partitions": PARTITIONS, "quick": args.quick,
                             "machine": machine(spark)}
            topic = Topic(broker, TOPIC, args.records_per_epoch, args.vocab)
            job = kafka_wordcount(broker.bootstrap)
            ours = Scenario(base / "per-epoch", job)
            ss = KafkaStructuredStreaming(base / "ss-per-epoch", broker.bootstrap)
            # the catch-up catalogs get a barrier after every epoch produced, as the per-epoch one does
            pending = [Scenario(base / f"catch-up-{rep}", job) for rep in range(args.repeat)]
            produce_s, ours_runs, inject_s = [], [], []
            for b in range(args.epochs):
                console.print(f"epoch {b + 1}: producing {args.records_per_epoch:,} records, then both sides")
                produce_s.append(topic.produce(b))
                for side in (SIDES if b % 2 == 0 else SIDES[::-1]):
                    if side == "ours":
                        inject_s.append(ours.inject())
                        ours_runs.append(profiled(spark, ours.engine, lambda: ours.run(spark, "async", max_epochs=1)))
                    else:
                        profiled(spark, ours.engine, lambda: ss.run(spark))
                for sc in pending:
                    sc.inject()
            topic.close()
            results["records"] = topic.records
            results["produce_s"] = produce_s
            results["per_epoch"] = {
                "ours": {"runs": ours_runs, "run_s": [r["total_s"] for r in ours_runs], "inject_s": inject_s,
                         "total_s": sum(r["total_s"] for r in ours_runs), "state_bytes": ours.state_bytes(),
                         "profile": summary_of(ours_runs, "profile")},
                "ss": {"runs": ss.runs, "run_s": [r["run_s"] for r in ss.runs],
                       "total_s": sum(r["run_s"] for r in ss.runs), "checkpoint_bytes": du(ss.checkpoint),
                       "state_files": ss.state_files(), "profile": summary_of(ss.runs, "profile")},
            }
            found = {"per-epoch ours": digest(ours.counts()), "per-epoch ss": digest(ss.counts())}

            samples: dict[str, list[dict]] = {side: [] for side in SIDES}
            for rep, side in turns(SIDES, args.repeat):
                console.print(f"catch-up, {side} (repetition {rep + 1})")
                if side == "ours":
                    sc = pending[rep]
                    run = profiled(spark, sc.engine, lambda: sc.run(spark, "async"))
                    run.update(state_bytes=sc.state_bytes(), counts_sha256=digest(sc.counts()))
                    sc.engine.dispose()
                else:
                    cs = KafkaStructuredStreaming(base / f"ss-catch-up-{rep}", broker.bootstrap)
                    run = profiled(spark, ours.engine, lambda: cs.run(spark))
                    run.update(checkpoint_bytes=du(cs.checkpoint), counts_sha256=digest(cs.counts()))
                found[f"catch-up {side} {rep + 1}"] = run["counts_sha256"]
                samples[side].append(run)
            results["catch_up"] = summarize(samples, topic.records)
            ours.engine.dispose()
        finally:
            spark.stop()
    shutil.rmtree(base, ignore_errors=True)
    results["load_average_before"], results["load_average_after"] = list(load_before), list(os.getloadavg())
    results["wall_s"] = time.perf_counter() - started

    found["plain-Python reference"] = digest(dict(topic.reference))
    assert len(set(found.values())) == 1, f"the scenarios' final counts differ: {found}"
    results["counts_sha256"] = found["plain-Python reference"]
    results["distinct_words"] = len(topic.reference)

    results["ratios"] = ratios(results)
    results["goals"] = GOALS
    print_tables(results, f"wordcount from Kafka, {topic.records:,} records in {args.epochs} epochs, "
                          f"{PARTITIONS} partitions, local[2]")
    for name, value in results["ratios"].items():
        goal = GOALS.get(name)
        verdict = "" if goal is None else f"  (goal <= {goal}: {'met' if value <= goal else 'NOT met'})"
        console.print(f"{name}: {value:.3f}{verdict}")
    options.write(args.out, results)
    console.print(f"written to {args.out}")


if __name__ == "__main__":
    main()
