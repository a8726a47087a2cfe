"""What a job brings for ``absreplay demo`` (``coordinator.dataflow.demo_data``): the demo reaches it through the
job it discovers, the reference job's and a user's alike. No Spark."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import absreplay.api as abs
from absreplay.commands.demo import demo_data, top_rows
from coordinator.dataflow.discovery import get_job
from coordinator.errors import UsageError


def test_the_demo_finds_wordcounts_sample_text_and_recount_through_discovery(tmp_path: Path) -> None:
    data = demo_data(get_job("wordcount"))
    assert data.land(tmp_path, 0, 40) == 40
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.txt")) == [
        "p0/seg-000000.txt", "p1/seg-000000.txt"]
    assert data.reference(tmp_path, {"p0": 0, "p1": 0}) == Counter()
    half, whole = data.reference(tmp_path, {"p0": 10, "p1": 10}), data.reference(tmp_path, {"p0": 20, "p1": 20})
    assert half and whole - half and not half - whole  # more records, more words; none lost


class Constant:
    def land(self, input_dir: Path, batch: int, records: int) -> int:
        return 0

    def reference(self, input_dir: Path, cut: dict[str, int]) -> dict[str, int]:
        return {"k": 1}


def declared(**settings: object) -> abs.Job:
    job = abs.Job("mine", **settings)
    job.source("lines").key_by("line", str).aggregate("n", n=abs.count()).sink("out", abs.SqlTable("mine"))
    return job


def test_a_users_job_brings_its_own_and_a_job_without_one_is_named() -> None:
    data = Constant()
    assert demo_data(declared(demo=data).definition("my_jobs/mine.py")) is data
    with pytest.raises(UsageError, match=r"job 'mine' \(my_jobs/mine.py\) brings no demo data: declare it with "
                                         r"abs.Job\(..., demo=...\)"):
        demo_data(declared().definition("my_jobs/mine.py"))


def test_the_top_rows_are_the_largest_values_else_the_first_keys() -> None:
    assert top_rows({"a": 1, "b": 3, "c": 3, "d": 2}, 3) == [("b", 3), ("c", 3), ("d", 2)]
    assert top_rows({"b": ("x", 1), "a": ("y", 2)}, 1) == [("a", ("y", 2))]
