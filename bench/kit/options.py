"""The options every benchmark of bench/ shares, and where its results go.

``--quick`` runs tiny sizes to check that a script works; its figures are no results, so its
JSON goes to ``bench/results/NAME-quick.json`` (git ignores it) unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results"


def parse(ap: argparse.ArgumentParser, name: str) -> argparse.Namespace:
    """``ap``'s arguments with --quick and --out added; ``out`` resolved for ``name``."""
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repetition: checks that it runs")
    ap.add_argument("--out", default=None, help=f"default: bench/results/{name}.json; with --quick, "
                                                f"{name}-quick.json (git ignores it)")
    args = ap.parse_args()
    args.out = Path(args.out) if args.out else RESULTS / f"{name}{'-quick' if args.quick else ''}.json"
    return args


def write(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2))
