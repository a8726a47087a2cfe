"""Upgrade benchmark: what `absreplay plan` says of each class of change to the README's clicks job, and
what `absreplay upgrade` then costs, against running the same epochs as the job ran them.

    python bench/upgrade_bench.py [--epochs 8] [--records 100000]

Per class, a fresh workspace (SQLite catalog, local state, one local[2] SparkSession, the command line
in this process): version 1 (a filter, then clicks per user into a SQL table) runs --epochs epochs of
--records clicks each, one `absreplay run` an epoch; the job file changes; `absreplay plan` prints its
plan (its exit code and each changed part are kept); `absreplay upgrade` runs (from the start of the
input, or from the oldest retained checkpoint for the changed filter). Records replayed are the input's records
after the upgrade's start; "over runs" is the upgrade's seconds over the sum of version 1's runs.
Prints a table and writes bench/results/upgrade.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from rich.console import Console
from rich.table import Table
from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from absreplay_examples.clicks_versions import PAGES, job_file  # noqa: E402

console = Console(width=160)

#: class -> (version 1's parts, version 2's (each over the first version's), the upgrade's arguments: None
#: when none is made)
CLASSES = {
    "new aggregate column": ({}, {"last": ', last=abs.max("ts")'}, []),
    "new operator and sink": ({}, {"pages": PAGES}, []),
    "changed filter, from the oldest retained checkpoint": ({}, {"skip": "p1"}, ["--from-checkpoint", "OLDEST"]),
    "removed operator and sink": ({"pages": PAGES}, {}, None),
    "incompatible key change": ({}, {"key": '{"user": str, "page": str}'}, None),
}


class Cli:
    """`absreplay ARGS` in this process, its Spark applications on ``spark`` (no JVM of their own)."""

    def __init__(self, spark, env: dict[str, str]) -> None:
        self.spark, self.env = spark, env

    def __call__(self, *args: str) -> tuple[int, str]:
        from absreplay.commands import cli, submit

        out = io.StringIO()
        with (mock.patch.dict(os.environ, self.env),
              mock.patch.object(submit, "run_processing",
                                lambda settings, app_args, app=submit.PROCESS_APP: submit.run_in_session(
                                    self.spark, app_args, app)),
              contextlib.redirect_stdout(out), contextlib.redirect_stderr(out)):
            try:
                cli.main(list(args))
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
        return code, out.getvalue()


def land(input_dir: Path, n: int, records: int) -> None:
    part = input_dir / "p0"
    part.mkdir(parents=True, exist_ok=True)
    (part / f"seg-{n:06d}.jsonl").write_text("".join(
        f'{{"user": "u{i % 1000}", "page": "p{i % 50}", "ts": {n * records + i}}}\n' for i in range(records)))


def measure(spark, base: Path, name: str, epochs: int, records: int) -> dict:
    from coordinator.catalog.db import make_engine
    from coordinator.checkpoints.store import CheckpointStore
    from coordinator.settings import Settings
    from coordinator.sources import source

    v1, v2, upgrade_args = CLASSES[name]
    home = base / name.replace(" ", "-").replace(",", "")
    env = {"ABS_HOME": str(home), "ABS_SPARK_MASTER": "local[2]", "COLUMNS": "200"}

    def declare(version: int, parts: dict[str, str]) -> None:
        jobs = home / f"jobs-{version}"
        jobs.mkdir(parents=True)
        (jobs / "clicks.py").write_text(job_file(**parts))
        env["ABS_JOBS_DIR"] = str(jobs)

    cli = Cli(spark, env)
    declare(1, v1)
    assert cli("db", "upgrade")[0] == 0
    settings = Settings.from_env(env)
    input_dir = source.input_dir(settings.data_dir, "clicks")
    runs_s = 0.0
    for n in range(epochs):
        land(input_dir, n, records)
        t0 = time.perf_counter()
        code, out = cli("run", "clicks")
        assert code == 0, out
        runs_s += time.perf_counter() - t0
    declare(2, v2)
    code, plan = cli("plan", "clicks", "--json")
    planned = json.loads(plan)
    changed = [f"{p['part']} {p['name']}: {p['change']}" for p in planned["parts"] if p["change"] != "unchanged"]
    found = {"class": name, "plan_exit": code, "plan": changed, "next_step": planned["next_step"],
             "v1_runs_s": round(runs_s, 2)}
    if upgrade_args is None:
        code, out = cli("upgrade", "clicks")
        found["upgrade"] = " ".join(out.split())[-160:]
        found["upgrade_exit"] = code
        return found
    store = CheckpointStore(make_engine(settings.database_url))
    oldest = min(c.checkpoint_id for c in store.checkpoints("clicks") if c.status == "COMPLETED")
    start = [oldest if a == "OLDEST" else a for a in upgrade_args]
    below = sum(store.cut("clicks", oldest).values()) if "OLDEST" in upgrade_args else 0
    t0 = time.perf_counter()
    code, out = cli("upgrade", "clicks", *map(str, start))
    assert code == 0, out
    upgrade_s = time.perf_counter() - t0
    # the upgraded sinks hold every click once (the filter's after its start): a figure of a wrong run is no figure
    kept = below + (epochs * records - below) * (49 / 50 if "skip" in v2 else 1)
    with store.engine.connect() as c:
        assert c.execute(text("SELECT sum(clicks) FROM clicks_per_user")).scalar() == kept, name
        if "pages" in v2:
            assert c.execute(text("SELECT sum(clicks) FROM clicks_per_page")).scalar() == epochs * records, name
    found |= {"upgrade_exit": code, "records_replayed": epochs * records - below, "upgrade_s": round(upgrade_s, 2),
              "upgrade_over_runs": round(upgrade_s / runs_s, 2)}
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "upgrade.json"))
    args = ap.parse_args()
    from spark_jobs.session import build_session

    base = Path(tempfile.mkdtemp(prefix="abs-upgrade-bench-"))
    spark = build_session("abs-upgrade-bench", 2, "local[2]")
    try:
        console.print("warming up the JVM (not measured)")
        measure(spark, base / "warmup", "new aggregate column", 2, 100)
        results = []
        for name in CLASSES:
            console.print(f"{name}: {args.epochs} epochs of {args.records:,} clicks")
            results.append(measure(spark, base, name, args.epochs, args.records))
    finally:
        spark.stop()
    table = Table(title=f"upgrades of the clicks job after {args.epochs} epochs of {args.records:,} clicks, local[2]")
    for col in ("class", "plan (exit)", "records replayed", "upgrade s", "version 1's runs s", "over runs"):
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(r["class"], "\n".join(r["plan"]) + f"\n(exit {r['plan_exit']})",
                      f"{r['records_replayed']:,}" if "records_replayed" in r else "-",
                      str(r.get("upgrade_s", "-")), str(r["v1_runs_s"]), str(r.get("upgrade_over_runs", "-")))
    console.print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"epochs": args.epochs, "records_per_epoch": args.records, "results": results},
                              indent=2) + "\n")
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
