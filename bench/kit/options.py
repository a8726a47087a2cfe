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


def parse_epochs(ap: argparse.ArgumentParser, name: str, epochs: int, unit: str, per_epoch: int,
                 repeat: str) -> argparse.Namespace:
    """``parse`` with the sizes of an epoch-by-epoch benchmark: ``--epochs``, ``--<unit>-per-epoch``,
    ``--vocab`` and ``--repeat`` (``repeat``: what is repeated), all tiny with --quick."""
    ap.add_argument("--epochs", type=int, default=epochs)
    ap.add_argument(f"--{unit}-per-epoch", type=int, default=per_epoch)
    ap.add_argument("--vocab", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=2, help=f"{repeat} (median)")
    args = parse(ap, name)
    if args.quick:
        args.epochs, args.vocab, args.repeat = 3, 500, 1
        setattr(args, f"{unit}_per_epoch", 2_000)
    return args


def write(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2))
