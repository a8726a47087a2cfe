"""What a command pays for before it does anything: the command line, the processing application's driver
and every Airflow task start a fresh interpreter, dozens of times in a test run and in a day of DAG runs.
pandas (pulled in by ``pyarrow.dataset``) cost 0.9 s of a 2.4 s start on the 2-core reference machine; it
is imported where a dataset is read, never by importing these entry points."""

from __future__ import annotations

import subprocess
import sys

import pytest

ENTRY_POINTS = ["absreplay.commands.cli", "spark_jobs.process", "absreplay.airflow.orchestration"]


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_an_entry_point_imports_no_pandas(module: str) -> None:
    code = f"import sys, {module}\nprint(sorted(m for m in ('pandas', 'pyarrow.dataset') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
