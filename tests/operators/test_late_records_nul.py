"""A record holding a NUL that becomes a dead letter while processing is stored like any other, on both
catalogs: a click too late for its window, and a click left without an event time (a bad field) before an
interval join. Inject accepts the clicks (the NUL is escaped in their JSON); the operators' dead letters
reach the catalog at the checkpoint's commit, and their payloads read back as the clicks, NUL and all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text

from coordinator.dataflow import discovery as job_discovery
from coordinator.catalog.models import record_bytes
from tests.helpers import make_workspace
from tests.segment_files import land

JOB_FILE = '''
import absreplay.api as abs
from pyspark.sql import functions as F


def untimed(clicks):
    # a click whose page holds a NUL loses its event time: the join has none to judge it by
    has_nul = F.instr(F.col("page"), chr(0)) > 0
    return clicks.withColumn("ts", F.when(has_nul, F.lit(None).cast("long")).otherwise(F.col("ts")))


job = abs.Job("nul_clicks", parallelism=1)
clicks = job.source("clicks", abs.json_lines({"user": str, "ts": int, "page": str}, time="ts"))
buys = job.source("buys", abs.json_lines({"user": str, "ts": int, "amount": int}, time="ts"))
(clicks.key_by("user", str).window("per_minute", abs.Tumbling(minutes=1), time="ts", delay_ms=0, clicks=abs.count())
    .sink("windows", abs.SqlTable("nul_windows")))
(clicks.map("untimed", untimed).key_by("user", str)
    .interval_join("matched", buys.key_by("user", str), time="ts", lower_ms=0, upper_ms=0)
    .sink("joined", abs.SqlTable("nul_joined"), columns={"user": str, "page": str, "amount": int}))
'''
MINUTE = 60_000
T0 = 28_333_334 * MINUTE  # epoch ms, on a minute boundary


@pytest.mark.sink_unchecked("judged here: the windows' counts and the one matched click")
def test_operators_dead_letters_holding_nul_are_stored(tmp_path: Path, catalog_url: str, spark, monkeypatch) -> None:
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "nul_clicks.py").write_text(JOB_FILE)
    monkeypatch.setenv("ABS_JOBS_DIR", str(folder))
    monkeypatch.setattr(job_discovery, "_FOUND", {})
    ws = make_workspace(tmp_path, catalog_url, job_discovery.get_job("nul_clicks"), jobs_dir=str(folder))

    def clicks(*rows: tuple[int, str]) -> list[str]:
        return [json.dumps({"user": "u1", "ts": T0 + m * MINUTE, "page": page}) for m, page in rows]

    land(ws.input_dir / "clicks" / "p0" / "seg-0001", clicks((5, "a")))
    land(ws.input_dir / "buys" / "p0" / "seg-0001", [json.dumps({"user": "u1", "ts": T0 + 5 * MINUTE, "amount": 7})])
    ws.epoch(spark)
    # the watermark is at minute 5: minute 1's window was emitted, so its click is late; both NUL clicks
    # have no event time for the join
    land(ws.input_dir / "clicks" / "p0" / "seg-0002", clicks((1, "late\x00click"), (6, "on\x00time")))
    assert ws.epoch(spark) == 2

    with ws.store.engine.connect() as c:
        dead = [(segment, reason, json.loads(record_bytes(payload, exact))) for segment, reason, payload, exact in
                c.execute(text('SELECT segment, reason, payload, payload_bytes FROM dead_letters '
                               'WHERE job = \'nul_clicks\' ORDER BY segment, "offset"'))]
        windows = sorted(c.execute(text("SELECT window_start, clicks FROM nul_windows")).all())
        joined = c.execute(text('SELECT "user", page, amount FROM nul_joined')).all()
    assert [(s, r.split(":")[0], d["page"]) for s, r, d in dead] == [
        ("matched", "no event time for matched", "late\x00click"),
        ("matched", "no event time for matched", "on\x00time"),
        ("per_minute", "late for per_minute", "late\x00click"),
    ]
    assert dead[2][2]["ts"] == T0 + MINUTE
    assert windows == [(T0 + 5 * MINUTE, 1)]  # minute 6's window waits for the watermark
    assert joined == [("u1", "a", 7)]
