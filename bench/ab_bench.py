"""Two checkouts of the project on the wordcount benchmark, in turns: did a change move the figures?

    python bench/ab_bench.py BEFORE_DIR AFTER_DIR [--rounds 2] [--backend local|spark] [--out FILE]

Each checkout runs its own ``bench/wordcount_bench.py`` with its own interpreter (``<dir>/.venv/bin/python``,
``make install`` there), before, after, before, after ... (``--rounds`` pairs), so both see the same machine
as it drifts. ``--backend`` sets ``ABS_STATE_BACKEND`` for both (``spark``: every keyed state a DataFrame).
Every run's final counts must be equal (else exit 1, nothing written). Per run it keeps the benchmark's own
ratios (each against figures of the same run: Structured Streaming's, the plain batch job's, snapshots
``none``) and the seconds behind them; per pair, after / before of each. Prints a table and writes
``bench/results/ab.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
#: the seconds and ratios compared (``wordcount_bench``'s JSON)
FIGURES = {
    "one epoch per run s (median)": lambda d: statistics.median(r["total_s"] for r in d["per_epoch"]["runs"]),
    "catch-up async s (median)": lambda d: d["catch_up"]["async"]["median_total_s"],
    "catch-up none s (median)": lambda d: d["catch_up"]["none"]["median_total_s"],
    "plain batch s (median)": lambda d: d["plain_batch_s"],
    "per_epoch_over_ss_rocksdb": lambda d: d["ratios"]["per_epoch_over_ss_rocksdb"],
    "catch_up_async_over_plain_batch": lambda d: d["ratios"]["catch_up_async_over_plain_batch"],
    "async_over_none": lambda d: d["ratios"]["async_over_none"],
}


def run(checkout: Path, backend: str, out: Path) -> dict:
    env = {**os.environ, "ABS_STATE_BACKEND": backend}
    print(f"== {checkout} ({backend})", flush=True)
    subprocess.run([str(checkout / ".venv" / "bin" / "python"), "bench/wordcount_bench.py", "--out", str(out)],
                   cwd=checkout, env=env, check=True)
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=2, choices=range(1, 11), metavar="1..10")
    parser.add_argument("--backend", choices=("local", "spark"), default="local")
    parser.add_argument("--out", type=Path, default=RESULTS / "ab.json")
    args = parser.parse_args(argv)
    for checkout in (args.before, args.after):
        if not (checkout / ".venv" / "bin" / "python").exists():
            parser.error(f"{checkout} has no .venv/bin/python: run `make install` there first")
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            for side, checkout in (("before", args.before), ("after", args.after)):
                runs[side].append(run(checkout.resolve(), args.backend, Path(tmp) / f"{side}-{k}.json"))
    counts = {d["counts_sha256"] for side in runs.values() for d in side}
    if len(counts) != 1:
        print(f"the runs counted different words ({len(counts)} digests): no figures written", file=sys.stderr)
        return 1
    table = {}
    for name, figure in FIGURES.items():
        before, after = [figure(d) for d in runs["before"]], [figure(d) for d in runs["after"]]
        table[name] = {"before": before, "after": after,
                       "after_over_before": [a / b for a, b in zip(after, before, strict=True)]}
    print(f"\n{'figure':34} {'before':>18} {'after':>18} {'after/before':>18}")
    for name, row in table.items():
        cells = [" ".join(f"{v:.2f}" for v in row[part]) for part in ("before", "after", "after_over_before")]
        print(f"{name:34} {cells[0]:>18} {cells[1]:>18} {cells[2]:>18}")
    args.out.write_text(json.dumps({
        "before": str(args.before), "after": str(args.after), "backend": args.backend, "rounds": args.rounds,
        "commits": {side: subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, text=True,
                                         capture_output=True).stdout.strip()
                    for side, checkout in (("before", args.before), ("after", args.after))},
        "counts_sha256": counts.pop(), "figures": table,
        "load_average": [runs[side][k]["load_average_before"] for k in range(args.rounds) for side in runs],
    }, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
