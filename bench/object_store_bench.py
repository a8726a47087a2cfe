"""Object-store benchmark: the wordcount job with its input and its state on an S3 server (s3proxy,
``tests/servers/s3.py``) against the same job on local disk, in one run.

    python bench/object_store_bench.py [--epochs 5] [--lines 20000] [--vocab 20000]
    python bench/object_store_bench.py --quick      # tiny sizes: checks that it runs

One local[2] SparkSession (parallelism 2) serves both targets: its SPARK_CONF_DIR holds the server's
spark-defaults.conf (the S3A jars and settings), which the coordinator reads too. Each target has its own
catalog (SQLite on local disk, as a user's database would be) and:
  local  ABS_DATA_DIR and ABS_STATE_URI under a local folder;
  s3     ABS_DATA_DIR=s3a://abs/s3/input, ABS_STATE_URI=s3a://abs/s3/state.
Before measuring, one throwaway epoch on each target (not measured): the JIT, and S3A's first use.

Scenarios, once per target, the targets taking turns (the order reversed from one step to the next):
  catch-up   E batches landed (--lines per partition, 2 partitions), E barriers injected, then one
             processing run of the E epochs and its finalize (the sink commit): wall times, and the S3
             requests the injects made and those the run and the finalize made.
  per-epoch  then E more batches one at a time: land, inject, a run of one epoch, finalize: each run's
             wall time, and the S3 requests each step (inject, process, finalize) made, by kind.
Requests are counted by the server (``S3Server.requests``: LIST, GET, HEAD, PUT, POST, DELETE) as the
difference around each step, and by what they were for (``areas``: under the input, under the state root,
other); landing is counted apart and left out. The local target must make no request.
Both targets' counts must be equal after the catch-up and at the end: the figures come from runs that
computed the same thing.

Reported: median per-epoch run local and S3 and their ratio (s3_over_local_per_epoch), the catch-up's
times and ratio (s3_over_local_catch_up), the requests per epoch by kind (medians over the per-epoch
runs; per subtask: per epoch / parallelism, an average), the state's bytes under each state root;
the JSON keeps every run's times and requests.
Prints the tables and writes bench/results/object_store.json.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

from rich.console import Console
from rich.table import Table
from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from absreplay_examples.sample_data import land_batch  # noqa: E402
from bench.kit import options  # noqa: E402
from bench.kit.catalog import WordcountCatalog  # noqa: E402
from bench.ss_anchor import digest, du  # noqa: E402
from bench.synthetic_bench import machine  # noqa: E402
from coordinator.settings import Settings  # noqa: E402
from tests.servers.s3 import REQUEST, S3Server, s3_server  # noqa: E402

console = Console(width=170)
TARGETS = ("local", "s3")
KINDS = ("LIST", "GET", "HEAD", "PUT", "POST", "DELETE")
STEPS = ("inject", "process", "finalize")
AREAS = ("input", "state")
FIELDS = (*KINDS, "total", *AREAS, "other")  # a step's requests: by kind, in all, by area
SINK_TABLE = "wordcount_counts"  # the job's SqlTable sink (absreplay_examples.wordcount)
BUCKET = "abs"
PARALLELISM = 2
WORDS_PER_LINE = 5


def order(step: int) -> tuple[str, ...]:
    """The targets in the order to run step ``step``: reversed every other step."""
    return TARGETS if step % 2 == 0 else TARGETS[::-1]


def kinds(counter: Counter[str]) -> dict[str, int]:
    return {k: counter.get(k, 0) for k in KINDS if counter.get(k, 0)} | {"total": sum(counter.values())}


def areas(log_lines: list[str]) -> dict[str, int]:
    """The requests of the server's log lines by what they were for: a key (or a listing's prefix) under a
    scenario's ``input/`` or ``state/``, or anything else (the bucket, folder markers above those)."""
    found: Counter[str] = Counter()
    for line in log_lines:
        m = REQUEST.match(line)
        if not m:
            continue
        prefix = re.search(r"[?&]prefix=([^&)]*)", line)
        key = m.group(2) or (unquote(prefix.group(1)) if prefix else "")
        parts = key.split("/")
        found[parts[1] if len(parts) > 2 and parts[1] in AREAS else "other"] += 1
    return {a: found[a] for a in (*AREAS, "other")}


class Scenario(WordcountCatalog):
    """A fresh catalog, input and state root for one target; every step timed, with the S3 requests it made."""

    def __init__(self, s3: S3Server, base: Path, target: str, name: str, sizes: argparse.Namespace) -> None:
        self.s3, self.target, self.sizes = s3, target, sizes
        env = {"ABS_HOME": str(base / name)}
        if target == "s3":
            env |= {"ABS_DATA_DIR": f"s3a://{BUCKET}/{name}/input", "ABS_STATE_URI": f"s3a://{BUCKET}/{name}/state"}
        super().__init__(Settings.from_env(env))

    def counted(self, step: Callable[[], object]) -> tuple[object, float, dict[str, int]]:
        """``step()``'s result, its wall time and the S3 requests made meanwhile, by kind, in all, and by what
        they were for (``areas``)."""
        before, logged = self.s3.requests(), self.logged()
        t0 = time.perf_counter()
        result = step()
        seconds = time.perf_counter() - t0
        return result, seconds, kinds(self.s3.requests() - before) | areas(self.logged()[len(logged):])

    def logged(self) -> list[str]:
        return self.s3.request_log.read_text().splitlines()

    def land(self, batch: int) -> dict[str, int]:
        def write() -> None:
            land_batch(self.input, batch, self.sizes.lines, partitions=2, vocab_size=self.sizes.vocab,
                       words_per_line=WORDS_PER_LINE)

        return self.counted(write)[2]

    def inject(self) -> tuple[float, dict[str, int]]:
        _, seconds, requests = self.counted(self.coordinator.inject)
        return seconds, requests

    def process(self, spark, epochs: int, max_epochs: int | None = None) -> dict:
        """One processing run (of ``epochs`` epochs) and its finalize: times and requests of each."""
        from spark_jobs.run.runner import EpochRunner
        from coordinator.modes import SnapshotMode

        runner = EpochRunner(spark, self.store, self.job, self.settings.data_dir, self.settings.state_uri,
                             mode=SnapshotMode("async"), max_epochs=max_epochs)
        report, process_s, process_req = self.counted(runner.run)
        _, finalize_s, finalize_req = self.counted(self.coordinator.finalize)
        failed = [t.checkpoint_id for t in report.snapshots if t.error]
        assert not failed, f"{self.target}: snapshots failed: {failed}"
        assert len(report.epochs) == epochs, f"{self.target}: {len(report.epochs)} epochs run, not {epochs}"
        return {"process_s": process_s, "finalize_s": finalize_s, "total_s": process_s + finalize_s,
                "restore_s": report.restore_s, "epoch_s": [e.process_s for e in report.epochs],
                "snapshot_sync_s": sum(t.sync_ms for t in report.snapshots) / 1000,
                "snapshot_async_s": sum(t.async_ms for t in report.snapshots) / 1000,
                "requests": {"process": process_req, "finalize": finalize_req}}

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as c:
            return dict(c.execute(text(f"SELECT word, count FROM {SINK_TABLE}")).all())

    def state_bytes(self) -> int:
        if self.target == "local":
            return du(Path(self.settings.state_uri.removeprefix("file://")))
        import pyarrow.fs as pafs

        root = self.settings.state_uri.removeprefix("s3a://")
        found = self.s3.filesystem().get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        return sum(f.size for f in found if f.type == pafs.FileType.File)


def warm_up(spark, sc: Scenario) -> float:
    """One epoch on a throwaway scenario (not measured): its wall time."""
    sc.land(0)
    sc.inject()
    return sc.process(spark, 1, max_epochs=1)["total_s"]


def catch_up(spark, sc: Scenario, epochs: int) -> dict:
    """E batches landed and injected, then one run of all E epochs and its finalize."""
    land, inject = Counter(), Counter()
    inject_s = 0.0
    for batch in range(epochs):
        land.update(sc.land(batch))
        seconds, requests = sc.inject()
        inject_s += seconds
        inject.update(requests)
    run = sc.process(spark, epochs)
    run["requests"] |= {"land": dict(land), "inject": dict(inject)}
    run["inject_s"] = inject_s
    run["counts_sha256"] = digest(sc.counts())
    return run


def per_epoch_step(spark, sc: Scenario, batch: int) -> dict:
    """One batch landed, its barrier injected, a run of that one epoch and its finalize."""
    land = sc.land(batch)
    inject_s, inject = sc.inject()
    run = sc.process(spark, 1, max_epochs=1)
    run["requests"] |= {"land": land, "inject": inject}
    run["inject_s"] = inject_s
    return run


def median_requests(runs: list[dict]) -> dict[str, dict[str, float]]:
    """Per step, the median over the runs of each field (kind, total, area); ``epoch``: the steps' sum."""
    out = {step: {k: statistics.median(r["requests"][step].get(k, 0) for r in runs) for k in FIELDS}
           for step in STEPS}
    out["epoch"] = {k: sum(out[step][k] for step in STEPS) for k in FIELDS}
    return out


def summary(results: dict) -> dict:
    cu, pe = results["catch_up"], results["per_epoch"]
    med = {t: statistics.median(r["total_s"] for r in pe[t]) for t in TARGETS}
    return {
        "per_epoch_median_s": med,
        "s3_over_local_per_epoch": med["s3"] / med["local"],
        "catch_up_s": {t: cu[t]["total_s"] for t in TARGETS},
        "s3_over_local_catch_up": cu["s3"]["total_s"] / cu["local"]["total_s"],
        "s3_requests_per_epoch": median_requests(pe["s3"]),
        "local_requests_total": sum(r["requests"][step]["total"] for r in [cu["local"], *pe["local"]] for step in STEPS),
    }


def fmt(requests: dict[str, float], names: tuple[str, ...] = KINDS, per: float = 1) -> str:
    return ", ".join(f"{k} {requests[k] / per:g}" for k in names if requests.get(k)) or "-"


def print_tables(results: dict, title: str) -> None:
    cu, pe, s = results["catch_up"], results["per_epoch"], results["summary"]
    table = Table(title=title)
    for col in ("", "local", "S3 (s3proxy)", "S3 / local"):
        table.add_column(col, justify="right")
    pe_med = s["per_epoch_median_s"]
    table.add_row("one epoch per run, run s (median)", f"{pe_med['local']:.2f}", f"{pe_med['s3']:.2f}",
                  f"{s['s3_over_local_per_epoch']:.2f}")
    for label, key in (("  of which process s", "process_s"), ("  of which finalize s", "finalize_s"),
                       ("  restore s", "restore_s"), ("  snapshot, sync part s", "snapshot_sync_s"),
                       ("  snapshot, async part s", "snapshot_async_s"), ("  inject s", "inject_s")):
        vals = {t: statistics.median(r[key] for r in pe[t]) for t in TARGETS}
        table.add_row(label + " (median)", f"{vals['local']:.2f}", f"{vals['s3']:.2f}", "")
    table.add_row(f"catch-up, {results['epochs']} epochs, run + finalize s", f"{cu['local']['total_s']:.2f}",
                  f"{cu['s3']['total_s']:.2f}", f"{s['s3_over_local_catch_up']:.2f}")
    table.add_row("  catch-up snapshots s (sync + async, sum)",
                  *(f"{cu[t]['snapshot_sync_s'] + cu[t]['snapshot_async_s']:.2f}" for t in TARGETS), "")
    table.add_row("  catch-up finalize s", f"{cu['local']['finalize_s']:.2f}", f"{cu['s3']['finalize_s']:.2f}", "")
    table.add_row("  catch-up injects s (sum)", f"{cu['local']['inject_s']:.2f}", f"{cu['s3']['inject_s']:.2f}", "")
    table.add_row("state MB at the end", *(f"{results['state_bytes'][t] / 1e6:.2f}" for t in TARGETS), "")
    console.print(table)

    req = s["s3_requests_per_epoch"]
    table = Table(title="S3 requests per epoch (one epoch per run, medians)")
    for col in ("step", "total", "by kind", f"by kind per subtask (average, / {PARALLELISM})", "for"):
        table.add_column(col, justify="right")
    areas_of = (*AREAS, "other")
    for step in (*STEPS, "epoch"):
        r = req[step]
        table.add_row(step, f"{r['total']:g}", fmt(r), fmt(r, per=PARALLELISM), fmt(r, areas_of))
    c = cu["s3"]["requests"]
    for step in STEPS:
        table.add_row(f"catch-up {step} ({results['epochs']} epochs)", f"{c[step]['total']}", fmt(c[step]), "",
                      fmt(c[step], areas_of))
    console.print(table)
    for step in STEPS:
        console.print(f"S3 requests per run, {step}: {[r['requests'][step]['total'] for r in pe['s3']]}")
    console.print(f"requests made by the local target: {s['local_requests_total']}")


def measure(spark, s3: S3Server, base: Path, args: argparse.Namespace) -> dict:
    console.print("warming up: one throwaway epoch per target (not measured)")
    warm = {t: warm_up(spark, Scenario(s3, base, t, f"warm-{t}", args)) for t in TARGETS}
    scenarios = {t: Scenario(s3, base, t, t, args) for t in TARGETS}
    results: dict = {"warm_up_s": warm, "catch_up": {}, "per_epoch": {t: [] for t in TARGETS}}
    for t in order(0):
        console.print(f"catch-up, {t}")
        results["catch_up"][t] = catch_up(spark, scenarios[t], args.epochs)
    assert results["catch_up"]["local"]["counts_sha256"] == results["catch_up"]["s3"]["counts_sha256"], \
        "local and S3 counts differ after the catch-up"
    for i in range(args.epochs):
        batch = args.epochs + i
        for t in order(i + 1):
            console.print(f"one epoch per run, {t}, batch {batch}")
            results["per_epoch"][t].append(per_epoch_step(spark, scenarios[t], batch))
    final = {t: scenarios[t].counts() for t in TARGETS}
    assert final["local"] == final["s3"], "local and S3 final counts differ"
    results["counts_sha256"], results["words"] = digest(final["local"]), len(final["local"])
    results["state_bytes"] = {t: scenarios[t].state_bytes() for t in TARGETS}
    for sc in scenarios.values():
        sc.engine.dispose()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=5, help="epochs per scenario (catch-up, then one per run)")
    ap.add_argument("--lines", type=int, default=20_000, help="lines per partition per batch (2 partitions)")
    ap.add_argument("--vocab", type=int, default=20_000)
    args = options.parse(ap, "object_store")
    if args.quick:
        args.epochs, args.lines, args.vocab = 2, 500, 200

    from spark_jobs.session import build_session

    base = Path(tempfile.mkdtemp(prefix="abs-objstore-"))
    started, load_before = time.perf_counter(), os.getloadavg()
    try:
        with s3_server(base / "s3") as s3:
            s3.bucket(BUCKET)
            os.environ["SPARK_CONF_DIR"] = str(s3.spark_conf_dir(base / "spark-conf"))
            spark = build_session("object-store-bench", PARALLELISM, "local[2]")
            try:
                info = machine(spark)
                results = measure(spark, s3, base, args)
            finally:
                spark.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    results = {"epochs": args.epochs, "lines_per_partition": args.lines, "partitions": 2, "vocab": args.vocab,
               "words_per_line": WORDS_PER_LINE, "parallelism": PARALLELISM, "quick": args.quick, "machine": info,
               **results}
    results["summary"] = summary(results)
    results["load_average_before"], results["load_average_after"] = list(load_before), list(os.getloadavg())
    results["wall_s"] = time.perf_counter() - started
    assert results["summary"]["local_requests_total"] == 0, "the local target made S3 requests"
    lines = 2 * args.lines
    print_tables(results, f"wordcount, {lines:,} lines an epoch, input and state local vs S3, local[2]")
    options.write(args.out, results)
    console.print(f"written to {args.out} ({results['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
