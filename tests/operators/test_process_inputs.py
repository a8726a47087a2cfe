"""What a keyed process function receives (docs/jobs.md, keyed process): two Spark DataFrames, the state rows
of the keys among the epoch's records (key and declared state columns) and the epoch's records with their
source position, ``_partition`` (string) and ``_seq`` (long)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import absreplay.api as abs
from tests.helpers import make_workspace
from tests.segment_files import land

pytestmark = [pytest.mark.spark]

#: per call: (state's dtypes, its rows, the records' dtypes, their rows)
CALLS: list[tuple] = []


def counted(state, records):
    assert isinstance(state, DataFrame) and isinstance(records, DataFrame)
    CALLS.append((state.dtypes, sorted(tuple(r) for r in state.collect()),
                  records.dtypes, sorted(tuple(r) for r in records.collect())))
    fresh = records.groupBy("k").agg(F.count(F.lit(1)).alias("m"))
    return fresh.join(state, "k", "left").select("k", (F.col("m") + F.coalesce("n", F.lit(0))).alias("n"))


@pytest.mark.sink_unchecked("judged here: what the function saw, call by call")
def test_a_process_function_gets_spark_dataframes_with_source_positions(tmp_path: Path, sqlite_url: str,
                                                                        spark) -> None:
    job = abs.Job("process_inputs", parallelism=1)
    (job.source("clicks", abs.json_lines({"k": str, "t": int}, time="t")).key_by("k", str)
        .process("per_key", counted, state={"n": int}).sink("out", abs.SqlTable("process_inputs")))
    ws = make_workspace(tmp_path, sqlite_url, job.definition())
    CALLS.clear()
    land(ws.input_dir / "p0" / "seg-0001", [json.dumps({"k": "a", "t": 1}), json.dumps({"k": "b", "t": 2})])
    ws.epoch(spark)
    land(ws.input_dir / "p0" / "seg-0002", [json.dumps({"k": "a", "t": 3})])
    ws.epoch(spark)
    state_types = [("k", "string"), ("n", "bigint")]
    record_types = [("k", "string"), ("t", "bigint"), ("_partition", "string"), ("_seq", "bigint")]
    assert CALLS == [
        (state_types, [], record_types, [("a", 1, "p0", 0), ("b", 2, "p0", 1)]),
        # only the touched key's state row, without ``updated`` or ``_delete``
        (state_types, [("a", 1)], record_types, [("a", 3, "p0", 2)]),
    ]
