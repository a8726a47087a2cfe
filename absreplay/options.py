"""The commands' number options (typer), bounded as the catalog's BIGINT columns are
(``coordinator.arguments``): a number out of range is a usage error naming the option."""

from __future__ import annotations

from typing import Any

import typer

from coordinator.arguments import BIGINT_MAX


def checkpoint_option(*names: str, help: str) -> Any:  # noqa: A002 - typer's own name
    """A checkpoint id option: ids start at 1."""
    return typer.Option(*names, min=1, max=BIGINT_MAX, help=help)


def count_option(*names: str, min: int = 1, help: str | None = None) -> Any:  # noqa: A002
    """A count option (cycles, rows shown, subtasks, batches), from ``min``."""
    return typer.Option(*names, min=min, max=BIGINT_MAX, help=help)
