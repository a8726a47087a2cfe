"""A Spark Structured Streaming anchor of the wordcount benchmark, in a process of its own.

    python -m bench.ss_anchor STORE --pool POOL --base DIR --epochs E --out RESULT.json

The wordcount job in Structured Streaming on one state store (``rocksdb``: RocksDBStateStoreProvider with
changelog checkpointing, its best configuration; ``hdfs``: the default HDFSBackedStateStoreProvider, which
holds the state on the JVM heap): text source -> the job's own tokenizer -> groupBy count, update mode, a
foreachBatch sink doing our SqlTable sink's work, Trigger.AvailableNow from its checkpoint, one epoch per
run, E runs after one warm-up run on a throwaway copy. ``run_isolated`` runs it as a child process, so an
anchor that runs out of memory (its JVM dies with it) is recorded as such and the benchmark goes on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
STATE = "org.apache.spark.sql.execution.streaming.state."
SS_STORES = {
    "rocksdb": {PROVIDER: STATE + "RocksDBStateStoreProvider", CHANGELOG: "true"},
    "hdfs": {PROVIDER: STATE + "HDFSBackedStateStoreProvider", CHANGELOG: "false"},
}


def segments(pool: Path, batch: int) -> list[Path]:
    return sorted(pool.glob(f"*/seg-{batch:06d}.txt"))


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def digest(counts: dict[str, int]) -> str:
    """What a scenario computed, comparable across scenarios: its final count per word."""
    return hashlib.sha256(repr(sorted(counts.items())).encode()).hexdigest()


class SqliteUpsertSink:
    """A foreachBatch sink doing our SqlTable sink's work: the batch's rows upserted by word in one
    transaction, with the batch id as commit record; a batch already committed writes nothing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with self.connect() as conn:
            # as our SQL table sink makes a keyed table (coordinator/sinks/sql_table.py)
            conn.execute("CREATE TABLE counts (word TEXT PRIMARY KEY, count INTEGER NOT NULL, batch_id INTEGER) "
                         "WITHOUT ROWID")
            conn.execute("CREATE TABLE commits (batch_id INTEGER PRIMARY KEY)")

    def connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None)  # transactions spelled out below

    def __call__(self, df, batch_id: int) -> None:
        # in key order, as our SQL table sink upserts (coordinator/sinks/sql_table.py): the B-tree walked in order
        table = df.toArrow().sort_by("word")
        rows = zip(table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True)
        with self.connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            if conn.execute("SELECT 1 FROM commits WHERE batch_id = ?", (batch_id,)).fetchone() is None:
                conn.executemany("INSERT INTO counts VALUES (?, ?, ?) ON CONFLICT (word) DO UPDATE "
                                 "SET count = excluded.count, batch_id = excluded.batch_id",
                                 ((w, c, batch_id) for w, c in rows))
                conn.execute("INSERT INTO commits VALUES (?)", (batch_id,))
            conn.execute("COMMIT")

    def counts(self) -> dict[str, int]:
        with self.connect() as conn:
            return dict(conn.execute("SELECT word, count FROM counts").fetchall())


class StructuredStreaming:
    """The wordcount job in Spark SS on one state store: its own input, checkpoint and SQLite sink."""

    def __init__(self, base: Path, store: str) -> None:
        self.store, self.input, self.checkpoint = store, base / "input", base / "checkpoint"
        self.input.mkdir(parents=True)
        self.sink = SqliteUpsertSink(base / "sink.db")
        self.runs: list[dict] = []

    def land(self, pool: Path, batch: int) -> None:
        for seg in segments(pool, batch):
            shutil.copy(seg, self.input / f"{seg.parent.name}-{seg.name}")

    def epoch(self, spark, pool: Path, batch: int) -> None:
        self.land(pool, batch)
        self.run(spark)

    def run(self, spark) -> None:
        """One AvailableNow run from the checkpoint: everything landed since the last one."""
        from pyspark.sql import functions as F

        from absreplay_examples.wordcount import tokenize

        for key, value in SS_STORES[self.store].items():
            spark.conf.set(key, value)  # a restarted query keeps its checkpoint's provider anyway
        t0 = time.perf_counter()
        lines = spark.readStream.format("text").load(str(self.input))
        counts = tokenize(lines.select(F.col("value").alias("line"))).groupBy("word").count()
        query = (counts.writeStream.outputMode("update").foreachBatch(self.sink)
                 .option("checkpointLocation", str(self.checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - t0
        self.runs.append({"run_s": elapsed, "batches": [dict(p["durationMs"]) for p in query.recentProgress]})

    def result(self) -> dict:
        state_files = Counter(p.suffix for p in (self.checkpoint / "state").rglob("*") if p.is_file())
        return {"provider": SS_STORES[self.store], "runs": self.runs, "run_s": [r["run_s"] for r in self.runs],
                "total_s": sum(r["run_s"] for r in self.runs), "checkpoint_bytes": du(self.checkpoint),
                "state_files": dict(sorted(state_files.items())), "counts": self.sink.counts()}




def run_isolated(store: str, base: Path, pool: Path, epochs: int) -> dict:
    """``store``'s anchor in a child process: its results, or ``{"error": ...}`` ("out of memory" when its JVM
    ran out of heap) with the tail of what it printed."""
    out = base / "result.json"
    base.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "bench.ss_anchor", store, "--pool", str(pool), "--base", str(base),
                           "--epochs", str(epochs), "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    if done.returncode == 0 and out.exists():
        return json.loads(out.read_text())
    text = done.stdout + done.stderr
    error = "out of memory" if "OutOfMemoryError" in text or "Java heap space" in text else \
        next((line for line in reversed(text.splitlines()) if line.strip()), f"exit {done.returncode}")
    return {"error": error, "exit_code": done.returncode, "output_tail": text.splitlines()[-20:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", choices=sorted(SS_STORES))
    ap.add_argument("--pool", type=Path, required=True)
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    from spark_jobs.session import build_session

    spark = build_session(f"abs-bench-ss-{args.store}", 2, "local[2]")
    try:
        StructuredStreaming(args.base / "warm-up", args.store).epoch(spark, args.pool, 0)  # not measured
        query = StructuredStreaming(args.base / "measured", args.store)
        for b in range(args.epochs):
            query.epoch(spark, args.pool, b)
        result = query.result()
    finally:
        spark.stop()
    result["counts_sha256"] = digest(result.pop("counts"))
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
