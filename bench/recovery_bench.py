"""Recovery benchmark: how long a recovery (restore + replay one epoch) takes against one
normal epoch, for states of 1e5 and 1e6 distinct keys.

    python bench/recovery_bench.py [--keys 100000 1000000] [--lines-per-epoch 100000]

Per state size, on one local[2] SparkSession with a SQLite catalog:
  1. epoch 1 lands every key once (the state holds K keys), checkpoint 1 completes;
  2. epoch 2 (--lines-per-epoch lines over the same keys) runs normally: its epoch
     time is "one normal epoch" (state already in memory, snapshot written);
  3. epoch 3 lands and is injected, then `recover` from checkpoint 2 runs: restore
     (read and verify every state file), settle, replay epoch 3, finalize.
Prints a table and writes bench/results/recovery.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from absreplay_examples.sample_data import land_segment  # noqa: E402
from coordinator.sources import source  # noqa: E402
from coordinator.catalog.db import make_engine, upgrade  # noqa: E402
from coordinator.checkpoints.coordinator import CheckpointCoordinator  # noqa: E402
from absreplay_examples.definitions import wordcount  # noqa: E402
from coordinator.modes import RecoveryKind, RecoveryMode, RecoveryRequest  # noqa: E402
from coordinator.settings import Settings  # noqa: E402
from coordinator.checkpoints.store import CheckpointStore  # noqa: E402

console = Console(width=140)
WORDS_PER_LINE = 10


def land(input_dir: Path, batch: int, words: list[str]) -> None:
    lines = [" ".join(words[i : i + WORDS_PER_LINE]) for i in range(0, len(words), WORDS_PER_LINE)]
    half = len(lines) // 2
    land_segment(input_dir / "p0", f"seg-{batch:06d}.txt", lines[:half])
    land_segment(input_dir / "p1", f"seg-{batch:06d}.txt", lines[half:])


def measure(spark, base: Path, keys: int, lines: int) -> dict:
    from spark_jobs.recover import run_recovery
    from spark_jobs.run.runner import EpochRunner
    from coordinator.modes import SnapshotMode

    settings = Settings.from_env({"ABS_HOME": str(base / f"k{keys}")})
    upgrade(settings.database_url)
    store, job = CheckpointStore(make_engine(settings.database_url)), wordcount()
    coord = CheckpointCoordinator(store, job, settings.data_dir, settings.state_uri)
    input_dir = source.input_dir(settings.data_dir, job.name)
    vocab = [f"k{i}" for i in range(keys)]
    rng = random.Random(keys)

    def run() -> tuple[float, object]:
        t0 = time.perf_counter()
        report = EpochRunner(spark, store, job, settings.data_dir, settings.state_uri, mode=SnapshotMode.ASYNC).run()
        coord.finalize()
        return time.perf_counter() - t0, report

    land(input_dir, 0, vocab)
    coord.inject()
    run()
    land(input_dir, 1, rng.choices(vocab, k=lines * WORDS_PER_LINE))
    coord.inject()
    normal_total, normal = run()
    land(input_dir, 2, rng.choices(vocab, k=lines * WORDS_PER_LINE))
    coord.inject()
    t0 = time.perf_counter()
    request = RecoveryRequest(RecoveryKind.RECOVER, RecoveryMode.FULL, 2)
    rec = run_recovery(spark, store, job, settings, request, SnapshotMode.ASYNC)
    recovery_s = time.perf_counter() - t0
    state_bytes = sum(a.state_bytes for a in store.acks(job.name, 2))
    return {
        "keys": keys,
        "state_bytes_at_2": state_bytes,
        "normal_epoch_s": round(normal.epochs[0].process_s, 3),
        "normal_run_s": round(normal_total, 3),
        "recovery_s": round(recovery_s, 3),
        "recovery_restore_s": round(rec.restore_s, 3),
        "recovery_replay_epoch_s": round(rec.epochs[0].process_s, 3),
        "recovery_over_normal_epoch": round(recovery_s / normal.epochs[0].process_s, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--lines-per-epoch", type=int, default=100_000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "recovery.json"))
    args = ap.parse_args()
    from spark_jobs.session import build_session

    base = Path(tempfile.mkdtemp(prefix="abs-recovery-bench-"))
    spark = build_session("abs-recovery-bench", 2, "local[2]")
    try:
        console.print("warming up the JVM (not measured)")
        measure(spark, base / "warmup", 10_000, 10_000)
        results = []
        for keys in args.keys:
            console.print(f"state of {keys:,} keys, epochs of {args.lines_per_epoch:,} lines")
            results.append(measure(spark, base, keys, args.lines_per_epoch))
    finally:
        spark.stop()
    table = Table(title="recovery (restore + replay one epoch) vs one normal epoch, local[2]")
    for col in results[0]:
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(*(f"{v:,}" if isinstance(v, int) else str(v) for v in r.values()))
    console.print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"lines_per_epoch": args.lines_per_epoch, "results": results}, indent=2) + "\n")
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
