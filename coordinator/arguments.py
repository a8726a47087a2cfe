"""Numbers as arguments, bounded once: checkpoint ids and counts.

The catalog keeps ids and counts in 64-bit (BIGINT) columns, so a larger number,
or one below the first id, is bad input: a usage error naming the option (exit
2, one line), never an OverflowError of the database driver. The commands
(typer, ``absreplay.options``), the Spark applications they spark-submit
(argparse, here) and the Airflow view's URLs share these bounds.
"""

from __future__ import annotations

import argparse

from coordinator.errors import UsageError

#: the largest value of the catalog's BIGINT columns
BIGINT_MAX = 2**63 - 1


def out_of_range(text: object, low: int = 1, high: int = BIGINT_MAX) -> str:
    """What is wrong with a number given as ``text``: the one wording of every bounds error."""
    return f"{str(text)!r} is not a whole number from {low} to {high}"


def positive_arg(text: str) -> int:
    """argparse ``type`` of a checkpoint id or a count: 1 to BIGINT_MAX."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= BIGINT_MAX:
        raise argparse.ArgumentTypeError(out_of_range(text))
    return value


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args`` (a parser made with ``exit_on_error=False``), a value its type refuses
    raised as UsageError: the application reports it as any bad input, one line, exit 2."""
    try:
        return parser.parse_args(argv)
    except argparse.ArgumentError as exc:
        raise UsageError(str(exc)) from None
