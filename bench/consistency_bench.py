"""Consistency benchmark (simulator, no Spark): what aligned (ABS), at-least-once and weak snapshots
lose and duplicate under the same seeded task kills, and how often their snapshots succeed.

    python bench/consistency_bench.py [--seeds 40] [--kills 3] [--downtime 20] [--capacity 4]
                                      [--success 1.0,0.9] [--tasks 2,4,8,16] [--task-success 0.9,0.99]

weak is weak consistency (loses records on failure; not exactly-once), seed 003:
no barriers; once every source passed cut n each stateful non-source task
snapshots its own state; a killed task restarts alone from its own latest
snapshot while the others run on; sources never rewind.

Kills: for each seed, input for the job, ``--checkpoints`` evenly spaced cuts
and ``--kills`` kills of random non-source tasks at random scheduler steps
(the same for every mode), each down ``--downtime`` steps; each (checkpoint,
task) snapshot fails with probability 1 - p (``--success``, the same draws in
every mode). aligned and at_least_once recover by a global restore of the
latest completed checkpoint and a source rewind; weak by restarting the task
alone. Jobs: wordcount (counts per word in the count operator against a plain
recount) and synthetic (records per key reaching the sink against a run with
no failure). Lost = sum over keys of what is missing, duplicated = of what is
in excess. aligned must lose and duplicate nothing: the script asserts it.

Snapshot success rate: one source hashing to N - 1 counters, ``--rate-checkpoints``
checkpoints per run, each task snapshot succeeding with probability p: an
aligned checkpoint completes only if all N tasks' snapshots do (about p^N);
a weak task keeps its own (about p per task). Staleness: how many checkpoints
back a failure right after checkpoint n would restore (mean over n; per task
for weak); the kill runs report the same for the snapshots their failures
restored (weak: of stateful tasks). Prints tables and writes
bench/results/consistency.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from absreplay_examples.definitions import synthetic, wordcount  # noqa: E402
from absreplay_examples.recount import tokenize  # noqa: E402
from coordinator.dataflow.graph import Edge, JobGraph, Operator, OperatorKind, Partitioning  # noqa: E402
from coordinator.simulator import (  # noqa: E402
    GENERIC,
    WORD_COUNT,
    Semantics,
    SnapshotFailures,
    SnapshotMode,
    final_states,
    kill_schedule,
    lost_and_duplicated,
    run_with_kills,
    simulate,
)

console = Console(width=160)
MODES = (SnapshotMode.ALIGNED, SnapshotMode.AT_LEAST_ONCE, SnapshotMode.WEAK)
LABELS = {
    SnapshotMode.ALIGNED: "aligned (ABS, exactly-once)",
    SnapshotMode.AT_LEAST_ONCE: "at_least_once (barrier tracker)",
    SnapshotMode.WEAK: "weak (loses records on failure; not exactly-once)",
}
# kills fall in this share of a failure-free run, so that they happen in every mode
KILL_WINDOW = 0.8


def summed(states: dict[str, dict], operator: str) -> Counter:
    out: Counter = Counter()
    for task, state in states.items():
        if task.startswith(f"{operator}#"):
            out.update(state)
    return out


class Job:
    """A job of the simulator: its graph and semantics, seeded input, and the per-key result measured."""

    def __init__(self, name: str, graph: JobGraph, semantics: Semantics, measured: str,
                 make_item: Callable[[random.Random], object]) -> None:
        self.name, self.graph, self.semantics, self.measured = name, graph, semantics, measured
        self.make_item = make_item
        self.sources = [t.name for t in graph.to_execution_graph().tasks if graph.operator(t.operator).kind
                        is OperatorKind.SOURCE]

    def inputs(self, rng: random.Random, per_source: int) -> dict[str, list]:
        return {name: [self.make_item(rng) for _ in range(per_source)] for name in self.sources}

    def truth(self, inputs: dict[str, list]) -> Counter:
        if self.semantics is WORD_COUNT:  # independent of the simulator: a plain recount
            return Counter(w for items in inputs.values() for line in items for w in tokenize(line))
        return summed(final_states(self.graph, inputs, semantics=self.semantics), self.measured)


def words_line(vocabulary: list[str]) -> Callable[[random.Random], str]:
    weights = [1 / (i + 1) for i in range(len(vocabulary))]  # Zipf-like: a few frequent words
    return lambda rng: " ".join(rng.choices(vocabulary, weights, k=rng.randint(1, 6)))


def jobs() -> list[Job]:
    vocabulary = [f"w{i}" for i in range(50)]
    return [
        Job("wordcount", wordcount(parallelism=2).graph, WORD_COUNT, "count", words_line(vocabulary)),
        Job("synthetic", synthetic(parallelism=2).graph, GENERIC, "sink", lambda rng: rng.randrange(1000)),
    ]


def kill_runs(job: Job, success: float, args: argparse.Namespace) -> dict:
    per_mode: dict[str, list[dict]] = {m: [] for m in MODES}
    for seed in range(args.seeds):
        rng = random.Random(seed)
        inputs = job.inputs(rng, args.lines)
        step = args.lines // (args.checkpoints + 1)
        cuts = {n: dict.fromkeys(job.sources, n * step) for n in range(1, args.checkpoints + 1)}
        truth = job.truth(inputs)
        free = simulate(job.graph, inputs, cuts, SnapshotMode.WEAK, seed, semantics=job.semantics)
        kills = kill_schedule(job.graph, args.kills, int(free.steps * KILL_WINDOW), seed, args.downtime)
        fails = SnapshotFailures(success, seed)
        for mode in MODES:
            run = run_with_kills(job.graph, inputs, cuts, mode, kills, seed, semantics=job.semantics,
                                 snapshot_fails=fails, channel_capacity=args.capacity)
            lost, duplicated = lost_and_duplicated(summed(run.final_states, job.measured), truth)
            if mode is SnapshotMode.ALIGNED:
                assert (lost, duplicated) == (0, 0), f"{job.name} seed {seed}: aligned lost {lost}, duplicated {duplicated}"
            # a stateless task restarts empty in weak mode: it has no snapshot whose age to count
            restarted = [f for f in run.failures if run.weak is None or f.task in run.weak.snapshotting]
            per_mode[mode].append({
                "records": sum(truth.values()), "lost": lost, "duplicated": duplicated,
                "kills": len(run.failures), "restored_age": [f.triggered - f.restored for f in restarted],
            })
    return {mode: summary(runs) for mode, runs in per_mode.items()}


def summary(runs: list[dict]) -> dict:
    records = sum(r["records"] for r in runs)
    ages = [a for r in runs for a in r["restored_age"]]
    lost, duplicated = sum(r["lost"] for r in runs), sum(r["duplicated"] for r in runs)
    return {
        "runs": len(runs), "kills": sum(r["kills"] for r in runs), "records": records,
        "lost": lost, "duplicated": duplicated, "lost_share": lost / records, "duplicated_share": duplicated / records,
        "runs_with_loss": sum(1 for r in runs if r["lost"]), "runs_with_duplicates": sum(1 for r in runs if r["duplicated"]),
        "max_lost_per_run": max(r["lost"] for r in runs), "max_duplicated_per_run": max(r["duplicated"] for r in runs),
        "restored_age_mean": statistics.fmean(ages) if ages else 0.0,
    }


def fan_out(tasks: int) -> JobGraph:
    """One source task hashing to tasks - 1 counter tasks: ``tasks`` tasks in all."""
    return JobGraph(
        operators=(Operator("src", OperatorKind.SOURCE, 1), Operator("count", OperatorKind.WINDOW, tasks - 1)),
        edges=(Edge("src", "count", Partitioning.HASH),),
    )


def staleness(acked: Iterable[int], checkpoints: int) -> list[int]:
    """For each checkpoint n, how many checkpoints back the latest success at or before n is (n if none)."""
    done, latest, out = set(acked), 0, []
    for n in range(1, checkpoints + 1):
        latest = n if n in done else latest
        out.append(n - latest)
    return out


def success_rate(tasks: int, p: float, args: argparse.Namespace) -> dict:
    graph, count = fan_out(tasks), args.rate_checkpoints
    inputs = {"src#0": list(range(count))}
    cuts = {n: {"src#0": n} for n in range(1, count + 1)}
    completed = acks = snapshots = 0
    aligned_age: list[int] = []
    weak_age: list[int] = []
    for seed in range(args.rate_runs):
        fails = SnapshotFailures(p, 1000 * tasks + seed)
        aligned = simulate(graph, inputs, cuts, SnapshotMode.ALIGNED, seed, snapshot_fails=fails)
        completed += len(aligned.snapshots)
        aligned_age += staleness(aligned.snapshots, count)
        weak = simulate(graph, inputs, cuts, SnapshotMode.WEAK, seed, snapshot_fails=fails).weak
        assert weak is not None and len(weak.snapshotting) == tasks - 1
        for task in sorted(weak.snapshotting):
            acked = [n for n, tasks_acked in weak.acks.items() if task in tasks_acked]
            acks += len(acked)
            weak_age += staleness(acked, count)
        snapshots += count * len(weak.snapshotting)
    checkpoints = count * args.rate_runs
    return {
        "tasks": tasks, "p": p, "checkpoints": checkpoints,
        "aligned_completed_rate": completed / checkpoints, "p_pow_n": p**tasks,
        "weak_task_snapshots": snapshots, "weak_task_success_rate": acks / snapshots,
        "aligned_staleness_mean": statistics.fmean(aligned_age), "weak_staleness_mean": statistics.fmean(weak_age),
    }


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=40, help="runs per job, p and mode (one kill schedule per seed)")
    ap.add_argument("--kills", type=int, default=3, help="task kills per run")
    ap.add_argument("--downtime", type=int, default=20, help="scheduler steps a killed task (or job) stays down")
    ap.add_argument("--capacity", type=int, default=4, help="messages a channel holds before backpressure")
    ap.add_argument("--lines", type=int, default=40, help="input items per source task")
    ap.add_argument("--checkpoints", type=int, default=7, help="evenly spaced cuts per run")
    ap.add_argument("--success", type=floats, default=[1.0, 0.9], help="task snapshot success p in the kill runs")
    ap.add_argument("--tasks", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4, 8, 16],
                    help="N, tasks acking an aligned checkpoint, in the success-rate runs")
    ap.add_argument("--task-success", type=floats, default=[0.9, 0.99], help="p in the success-rate runs")
    ap.add_argument("--rate-checkpoints", type=int, default=200)
    ap.add_argument("--rate-runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "consistency.json")
    args = ap.parse_args()

    t0 = time.perf_counter()
    kills: dict[str, dict] = {}
    for job in jobs():
        for p in args.success:
            console.print(f"{job.name}: {args.seeds} kill schedules, snapshot success p={p}")
            kills.setdefault(job.name, {})[str(p)] = kill_runs(job, p, args)
    rates = []
    for tasks in args.tasks:
        for p in args.task_success:
            rates.append(success_rate(tasks, p, args))
    seconds = time.perf_counter() - t0

    table = Table(title=f"lost and duplicated under the same kills ({args.seeds} seeds x {args.kills} kills, "
                        f"downtime {args.downtime} steps, channel capacity {args.capacity})")
    for col in ("job", "p", "mode", "kills", "records", "lost", "duplicated", "lost %", "dup %", "runs losing",
                "restored age"):
        table.add_column(col, justify="left" if col in ("job", "mode") else "right")
    for job_name, by_p in kills.items():
        for p, by_mode in by_p.items():
            for mode, r in by_mode.items():
                table.add_row(job_name, p, LABELS[SnapshotMode(mode)], str(r["kills"]), f"{r['records']:,}",
                              f"{r['lost']:,}", f"{r['duplicated']:,}", f"{r['lost_share']:.2%}",
                              f"{r['duplicated_share']:.2%}", f"{r['runs_with_loss']}/{r['runs']}",
                              f"{r['restored_age_mean']:.2f}")
    console.print(table)
    rate_table = Table(title=f"snapshot success: aligned checkpoint vs weak task snapshot "
                             f"({args.rate_runs} x {args.rate_checkpoints} checkpoints each)")
    for col in ("N tasks", "p", "aligned completed", "p^N", "weak per task", "aligned staleness", "weak staleness"):
        rate_table.add_column(col, justify="right")
    for r in rates:
        rate_table.add_row(str(r["tasks"]), str(r["p"]), f"{r['aligned_completed_rate']:.3f}", f"{r['p_pow_n']:.3f}",
                           f"{r['weak_task_success_rate']:.3f}", f"{r['aligned_staleness_mean']:.2f}",
                           f"{r['weak_staleness_mean']:.2f}")
    console.print(rate_table)
    console.print(f"{seconds:.1f} s; staleness and restored age in checkpoints behind the latest triggered")

    result = {"config": {k: v for k, v in vars(args).items() if k != "out"},
              "modes": {str(m): LABELS[m] for m in MODES},
              "kills": kills, "success_rate": rates, "seconds": seconds}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
