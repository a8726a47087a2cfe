"""How the benchmarks repeat runs: the modes take turns, and each mode keeps its median run.

A machine's load drifts during a benchmark, so the modes alternate within a repetition (the order
reversed every other one) rather than running one mode's repetitions back to back; each mode is
then summarized by the median of its runs' ``total_s`` and the run nearest that median (its
breakdown is what a table shows).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence


def turns(modes: Sequence[str], repeat: int) -> Iterator[tuple[int, str]]:
    """(repetition, mode) in the order to run them."""
    for rep in range(repeat):
        for mode in (modes if rep % 2 == 0 else modes[::-1]):
            yield rep, mode


def summarize(samples: dict[str, list[dict]], records: int) -> dict[str, dict]:
    """Per mode: the run nearest the median ``total_s``, with the median, records/s at the median and
    every run's total."""
    out = {}
    for mode, runs in samples.items():
        median = statistics.median(r["total_s"] for r in runs)
        typical = min(runs, key=lambda r: abs(r["total_s"] - median))
        out[mode] = {**typical, "median_total_s": median, "records_per_s": records / median,
                     "all_total_s": [r["total_s"] for r in runs]}
    return out
