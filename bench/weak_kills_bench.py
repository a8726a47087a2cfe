"""Weak consistency against aligned ABS in the Spark runtime: records lost and duplicated under the
same seeded crashes, and what each costs while nothing fails.

    python bench/weak_kills_bench.py [--cycles 30] [--crash 0.3] [--lines 2000] [--seed 2]

weak is weak consistency (``consistency="weak"``; loses records on failure, never duplicates
them; not exactly-once), seed 003. The same wordcount job runs twice on local[2], once declared
``exactly_once`` (aligned ABS, async snapshots) and once ``weak``, each with its own SQLite catalog
and state root, over the same input and the same crash schedule: per cycle a batch of lines lands
and a barrier is injected; with probability ``--crash`` the run crashes (``ProcessCrash``, what a
SIGKILL there leaves: ``coordinator.faults``) at a fault point drawn from ``epoch.compute``,
``snapshot.before_ack`` and ``snapshot.after_ack`` in the cycle's epoch, and the next run picks up
(exactly-once: from the latest completed checkpoint, replaying; weak: after the last epoch read,
each operator from its own snapshot); then finalize. At the end each sink is compared with a
plain recount of every line that landed: lost = word occurrences missing, duplicated = in excess.
exactly-once must be 0 / 0: the script asserts it. Also reported: the seconds each run took (the
crash-free runs apart). The at-least-once mode exists only in the simulator
(``bench/consistency_bench.py``).

Prints a table and writes bench/results/weak_kills.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from absreplay_examples.definitions import wordcount  # noqa: E402
from absreplay_examples.recount import recount  # noqa: E402
from absreplay_examples.sample_data import land_batch  # noqa: E402
from bench.kit import options  # noqa: E402
from coordinator.catalog.db import make_engine, upgrade  # noqa: E402
from coordinator.checkpoints import weak  # noqa: E402
from coordinator.checkpoints.coordinator import CheckpointCoordinator  # noqa: E402
from coordinator.checkpoints.store import CheckpointStore  # noqa: E402
from coordinator.faults import ProcessCrash  # noqa: E402
from coordinator.settings import Settings  # noqa: E402
from coordinator.sources import source  # noqa: E402

console = Console(width=140)
POINTS = ("epoch.compute", "snapshot.before_ack", "snapshot.after_ack")
CONSISTENCIES = ("exactly_once", "weak")


def schedule(cycles: int, crash: float, seed: int) -> list[str | None]:
    """Per cycle the fault point its run crashes at (None: no crash); the same for every consistency."""
    rng = random.Random(seed)
    return [rng.choice(POINTS) if rng.random() < crash else None for _ in range(cycles)]


class Scenario:
    def __init__(self, root: Path, consistency: str) -> None:
        self.settings = Settings.from_env({"ABS_HOME": str(root)})
        upgrade(self.settings.database_url)
        self.engine = make_engine(self.settings.database_url)
        self.store = CheckpointStore(self.engine)
        self.job = replace(wordcount(), consistency=consistency)
        self.coordinator = CheckpointCoordinator(self.store, self.job, self.settings.data_dir, self.settings.state_uri)
        self.input = source.input_dir(self.settings.data_dir, self.job.name)

    def run(self, spark, fault: str | None, checkpoint_id: int) -> tuple[float, bool]:
        from spark_jobs.run.runner import EpochRunner
        from coordinator.modes import SnapshotMode

        armed = f"{fault}@{checkpoint_id}" + ("/1" if fault == "snapshot.after_ack" else "")
        if fault:
            os.environ["ABS_FAULTS"] = f"{armed}=crash"
        t0 = time.perf_counter()
        try:
            EpochRunner(spark, self.store, self.job, self.settings.data_dir, self.settings.state_uri,
                        mode=SnapshotMode.ASYNC).run()
            crashed = False
        except ProcessCrash:
            crashed = True
        finally:
            os.environ.pop("ABS_FAULTS", None)
        return time.perf_counter() - t0, crashed

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as c:
            return dict(c.execute(text("SELECT word, count FROM wordcount_counts")).all())


def lost_and_duplicated(expected: dict[str, int], got: dict[str, int]) -> tuple[int, int]:
    lost = sum(max(0, n - got.get(w, 0)) for w, n in expected.items())
    duplicated = sum(max(0, n - expected.get(w, 0)) for w, n in got.items())
    return lost, duplicated


def measure(spark, base: Path, consistency: str, plan: list[str | None], lines: int) -> dict:
    sc = Scenario(base / consistency, consistency)
    clean_s, crashes, recovered_s = [], 0, []
    for cycle, fault in enumerate(plan):
        land_batch(sc.input, cycle, lines, partitions=2, vocab_size=2000)
        checkpoint_id = sc.coordinator.inject().checkpoint_id
        seconds, crashed = sc.run(spark, fault, checkpoint_id)
        if crashed:
            crashes += 1
            seconds, again = sc.run(spark, None, checkpoint_id)  # the next run picks up
            assert not again
            recovered_s.append(seconds)
        else:
            clean_s.append(seconds)
        sc.coordinator.finalize()
        console.print(f"  {consistency:>12} cycle {cycle + 1}/{len(plan)}: "
                      f"{'crashed at ' + fault + ', then ' if crashed else ''}{seconds:.2f}s")
    last = max(c.checkpoint_id for c in sc.store.checkpoints(sc.job.name))
    expected = dict(recount(sc.input, sc.store.cut(sc.job.name, last)))
    lost, duplicated = lost_and_duplicated(expected, sc.counts())
    sc.engine.dispose()
    return {"words": sum(expected.values()), "lost": lost, "duplicated": duplicated, "crashes": crashes,
            "median_clean_run_s": statistics.median(clean_s) if clean_s else None,
            "median_run_after_crash_s": statistics.median(recovered_s) if recovered_s else None,
            "clean_run_s": clean_s, "run_after_crash_s": recovered_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--crash", type=float, default=0.3, help="probability that a cycle's run crashes")
    ap.add_argument("--lines", type=int, default=2000, help="lines landed per cycle")
    ap.add_argument("--seed", type=int, default=2)
    args = options.parse(ap, "weak_kills")
    if args.quick:
        args.cycles, args.lines = 4, 200
    from spark_jobs.session import build_session

    plan = schedule(args.cycles, args.crash, args.seed)
    base = Path(tempfile.mkdtemp(prefix="abs-weak-kills-"))
    started = time.perf_counter()
    spark = build_session("abs-weak-kills", 2, "local[2]")
    results: dict = {"cycles": args.cycles, "crash_probability": args.crash, "lines_per_cycle": args.lines,
                     "seed": args.seed, "schedule": plan, "label": weak.LABEL,
                     "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                                 "spark": spark.version, "master": spark.sparkContext.master}}
    try:
        for consistency in CONSISTENCIES:
            console.print(f"{consistency}: {args.cycles} cycles, crashes at {sum(1 for p in plan if p)} of them")
            results[consistency] = measure(spark, base, consistency, plan, args.lines)
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    results["wall_s"] = time.perf_counter() - started
    table = Table(title=f"wordcount under the same {sum(1 for p in plan if p)} crashes in {args.cycles} cycles "
                        f"(local[2]); weak = {weak.LABEL}")
    for col in ("consistency", "words", "lost", "duplicated", "lost %", "median run s (no crash)",
                "median run s after a crash"):
        table.add_column(col, justify="left" if col == "consistency" else "right")
    for c in CONSISTENCIES:
        r = results[c]
        fmt = (lambda x: "-" if x is None else f"{x:.2f}")
        table.add_row(c, f"{r['words']:,}", f"{r['lost']:,}", f"{r['duplicated']:,}",
                      f"{100 * r['lost'] / r['words']:.2f}", fmt(r["median_clean_run_s"]),
                      fmt(r["median_run_after_crash_s"]))
    console.print(table)
    options.write(args.out, results)
    console.print(f"written to {args.out} in {results['wall_s']:.0f}s")
    exact = results["exactly_once"]
    assert (exact["lost"], exact["duplicated"]) == (0, 0), f"exactly-once lost or duplicated: {exact}"


if __name__ == "__main__":
    main()
