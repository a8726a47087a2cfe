"""What a job brings for ``absreplay demo``: sample input to land, and an independent reference of what
its sink must hold after exactly the records before a barrier (the check an exactly-once run passes).

A job declares it as ``abs.Job(..., demo=...)``; the demo finds the job by discovery, as every command
does, and reaches it through the job's declaration (``JobDefinition.spec.demo``). The reference jobs
implement it; any job may.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class DemoData(Protocol):
    def land(self, input_dir: Path, batch: int, records: int) -> int:
        """Land batch ``batch`` (0, 1, ...) of about ``records`` records as segment files under
        ``input_dir`` (a folder per partition, as ``absreplay inject`` reads them), the same for the
        same batch every time; returns how many records landed."""
        ...

    def reference(self, input_dir: Path, cut: Mapping[str, int]) -> Mapping[Any, Any]:
        """What the job's first keyed sink must hold once exactly the first ``cut[partition]``
        records of each partition are processed, computed without Spark: key -> value (a tuple of
        the values when the sink has several value columns)."""
        ...
