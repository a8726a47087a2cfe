"""Event time as timestamps, through Spark: inject's plain-Python check (coordinator.sources.event_time)
accepts the strings Spark reads, as the same instants, and refuses the others (the boundary, over a few
thousand variants, for JSON lines and CSV as the job's records are parsed); Parquet timestamp columns
give their instant; and tumbling windows on ISO-8601 times equal the same windows on epoch ms
(tests/jobs/clicks_by_time.py), with `verify` exit 0, also when SIGKILLs stop the runs."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

import absreplay.api as abs
from coordinator.dataflow.discovery import get_job
from coordinator.sources.event_time import TimestampError, event_time_ms
from spark_jobs.records.event_time import event_ms
from spark_jobs.records.record_parsing import parse
from tests.helpers import JOBS_DIR, cli, cli_ok, crash, kill_when, make_workspace, start
from tests.sources.test_event_time_formats import ACCEPTED, NOT_TIMESTAMPS, REFUSED, T
from tests.window_reference import tumbling

pytestmark = [pytest.mark.spark]
JOBS = str(JOBS_DIR)
#: what Spark reads and inject refuses on purpose (the same instant could not be read again)
ON_PURPOSE = ("a time without a date", "a named time zone")


def variants() -> list[str]:
    dates = ["2026-11-25", "2026-1-5", "+2026-11-25", "-0044-03-15", "2024-02-29", "2023-02-29", "294247-01-10",
             "2026-11", "2026", "26-11-25", "2026-11-25 "]
    separators = ["T", " ", "t", ""]
    times = ["10:00:00", "10:00", "10", "1:2:3", "10:00:00.1", "10:00:00.123456789", "10:00:00.", "23:59:60", ""]
    zones = ["", "Z", "+01:00", "-0530", "+1:00", "+01:5", " +01:00", "UTC", "GMT+2", "UT-01:30", "+19:00",
             "Europe/Paris", "z", "+01:00:59", "+01:00:60", "GMT", "+"]
    generated = [d + s + t + z for d, s, t, z in itertools.product(dates, separators, times, zones)]
    return sorted({*generated, *(s for s, _ in ACCEPTED), *NOT_TIMESTAMPS, *REFUSED})


def python_reading(value: str) -> int | str:
    try:
        return event_time_ms(value, "timestamp")
    except TimestampError as exc:
        return str(exc)


def test_inject_accepts_exactly_the_strings_spark_reads_as_the_same_instants(spark) -> None:
    every = variants()
    in_csv = [s for s in every if "," not in s]  # CSV does not quote the delimiter
    formats = {
        "json": (abs.json_lines({"ts": dt.datetime}, time="ts"), every, [json.dumps({"ts": s}) for s in every]),
        "csv": (abs.csv({"ts": dt.datetime, "n": int}, time="ts"), in_csv, [f"{s},1" for s in in_csv]),
    }
    for kind, (fmt, strings, lines) in formats.items():
        read = parse(fmt, spark.createDataFrame([(line,) for line in lines], "line string"))
        assert read.schema["ts"].dataType.typeName() == "timestamp"
        spark_ms = [r[0] for r in read.select(event_ms(read, "ts")).collect()]
        assert len(spark_ms) == len(strings)
        wrong, on_purpose = [], Counter()
        for s, line, got in zip(strings, lines, spark_ms, strict=True):
            mine = python_reading(s)
            problem = fmt.problem(line.encode())
            if isinstance(mine, int):
                assert problem is None, (kind, s, problem)
                if got != mine:
                    wrong.append((s, "spark", got, "inject", mine))
            else:
                assert problem is not None and mine in problem, (kind, s, problem)
                if got is not None:
                    if any(why in mine for why in ON_PURPOSE):
                        on_purpose[mine.split(" (")[0].split(":")[0]] += 1
                    else:
                        wrong.append((s, "spark", got, "inject refuses", mine))
        assert not wrong, f"{kind}: {len(wrong)} strings read otherwise: {wrong[:10]}"
        accepted = sum(isinstance(python_reading(s), int) for s in strings)
        assert accepted > 500 and len(strings) - accepted > 500, (accepted, len(strings))
        assert set(on_purpose) == {"a time without a date", "a named time zone"}, on_purpose


def test_parquet_timestamp_columns_give_their_instant(spark, tmp_path) -> None:
    when = dt.datetime(2026, 11, 25, 10, 0, 0, 123456, tzinfo=dt.timezone.utc)
    fmt = abs.parquet({"ts": dt.datetime}, time="ts")
    kinds = {"us_utc": pa.timestamp("us", tz="UTC"), "ms_paris": pa.timestamp("ms", tz="Europe/Paris"),
             "us_naive": pa.timestamp("us")}  # no zone: a wall-clock time in the session time zone, UTC
    for name, t in kinds.items():
        pq.write_table(pa.table({"ts": pa.array([when if t.tz else when.replace(tzinfo=None)], t)}),
                       tmp_path / f"{name}.parquet")
    pq.write_table(pa.table({"ts": pa.array([when], pa.timestamp("ns", tz="UTC"))}), tmp_path / "int96.parquet",
                   use_deprecated_int96_timestamps=True)
    for name in [*kinds, "int96"]:
        records = parse(fmt, spark.read.parquet(str(tmp_path / f"{name}.parquet")))
        assert [r[0] for r in records.select(event_ms(records, "ts")).collect()] == [T + 123], name


# -- windows on ISO times equal windows on epoch ms ------------------------------------------------------
MINUTE = 60_000
WINDOW, DELAY = 10 * MINUTE, 5 * MINUTE
T0 = 1_795_597_200_000  # 2026-11-25T09:00:00Z, on a window boundary
#: each batch's click minutes: on time, then (from batch 1 on) behind the watermark, some of them too late
MINUTES = [list(range(25)), [*range(25, 45), 2, 7, 9, 12, 18], [*range(45, 60), 4, 16, 23, 31, 33, 38]]
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def iso(ms: int, style: int) -> str:
    """``ms`` written as people write times, formatted by Python's datetime (not the parser under test)."""
    utc = EPOCH + dt.timedelta(milliseconds=ms)
    plus_one, minus_530 = dt.timezone(dt.timedelta(hours=1)), dt.timezone(-dt.timedelta(hours=5, minutes=30))
    return [utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z",
            utc.astimezone(plus_one).isoformat(timespec="milliseconds"),
            utc.replace(tzinfo=None).isoformat(sep=" ", timespec="milliseconds"),  # no zone: UTC
            utc.astimezone(minus_530).isoformat(timespec="microseconds"),
            utc.astimezone(plus_one).strftime("%Y-%m-%dT%H:%M:%S.%f%z")][style % 5]


def clicks_of(batch: int) -> list[dict]:
    return [{"id": f"c{batch}-{i}", "user": f"u{i % 3}", "ms": T0 + m * MINUTE + 37 * i}
            for i, m in enumerate(MINUTES[batch])]


def land(input_dir: Path, batch: int, lines: list[str]) -> None:
    for part in range(2):
        path = input_dir / f"p{part}" / f"seg-{batch:04d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_name(".tmp").write_text("".join(line + "\n" for line in lines[part::2]))
        os.replace(path.with_name(".tmp"), path)


def windows_of(batches: list[list[dict]]) -> tuple[Counter, set[str]]:
    return tumbling(batches, WINDOW, DELAY, "ms")


def iso_lines(clicks: list[dict]) -> list[str]:
    return [json.dumps({"id": c["id"], "user": c["user"], "ts": iso(c["ms"], i)}) for i, c in enumerate(clicks)]


def window_sink(ws, name: str) -> Counter:
    with ws.store.engine.connect() as c:
        return Counter({(u, start, end): n for u, start, end, n in c.execute(text(
            f'SELECT "user", window_start, window_end, clicks FROM {name}_per_10_minutes'))})


@pytest.mark.sink_unchecked("judged here against plain Python over the clicks")
def test_windows_on_iso_times_equal_windows_on_epoch_ms(tmp_path, sqlite_url, spark, monkeypatch) -> None:
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    batches = [clicks_of(b) for b in range(len(MINUTES))]
    for c in (c for clicks in batches for c in clicks):  # the instants the ISO job will see
        assert {event_time_ms(iso(c["ms"], s), "timestamp") for s in range(5)} == {c["ms"]}
    sinks, dead = {}, {}
    for name in ("clicks_iso", "clicks_ms"):
        ws = make_workspace(tmp_path / name, sqlite_url, get_job(name), jobs_dir=JOBS)
        for b, clicks in enumerate(batches):
            lines = iso_lines(clicks) if name == "clicks_iso" else [
                json.dumps({"id": c["id"], "user": c["user"], "ts": c["ms"]}) for c in clicks]
            if b == 2:  # a resent click, and for the ISO job times Spark reads otherwise or not at all
                lines.insert(3, lines[0])
                if name == "clicks_iso":
                    lines += [json.dumps({"id": f"bad{k}", "user": "u0", "ts": t}) for k, t in enumerate(
                        ["2026-11-25T09:50:00 Europe/Paris", "09:50:00", "2026-11-31T09:50:00Z", T0 // 1000])]
            land(ws.input_dir, b, lines)
            ws.coordinator.inject()
            assert not ws.run_epochs(spark).failed
            ws.coordinator.finalize()
        sinks[name] = window_sink(ws, name)
        with ws.store.engine.connect() as c:
            dead[name] = c.execute(text(f"SELECT segment, reason, payload FROM dead_letters WHERE job = '{name}'"
                                        )).all()
        r = cli(ws, "verify", name, spark=spark)
        assert r.code == 0, r.out + r.err
        assert "checkpoint 3 verified" in r.out

    windows, late = windows_of(batches)
    assert len(late) == 6 and len(windows) > 10
    expected = Counter({(u, start, start + WINDOW): n for (u, start), n in windows.items()})
    assert sinks["clicks_iso"] == sinks["clicks_ms"] == expected
    for name in sinks:
        assert {json.loads(p)["id"] for s, _, p in dead[name] if s == "per_10_minutes"} == late, name
    at_inject = sorted(reason.split(":")[0].split(" (")[0] for s, reason, _ in dead["clicks_iso"]
                       if s != "per_10_minutes")
    assert len(at_inject) == 5, at_inject  # the resent click, and the four times
    assert sum("field 'ts' is not a timestamp" in r for r in at_inject) == 4, at_inject


@pytest.mark.heavy(seconds=60)
@pytest.mark.timeout(600)
@pytest.mark.sink_unchecked("judged here against plain Python over the clicks")
def test_windows_on_iso_times_are_exact_under_a_crash_a_sigkill_and_recovery(tmp_path, sqlite_url, spark,
                                                                              monkeypatch, summary) -> None:
    """The ISO job's three epochs, its runs crashed at epoch 2's fault point (on the test's session: what a
    SIGKILL there leaves) and SIGKILLed from outside once epoch 2 is done, then recovered: each window once,
    each late click one dead letter."""
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    batches = [clicks_of(b) for b in range(len(MINUTES))]
    ws = make_workspace(tmp_path / "kills", sqlite_url, get_job("clicks_iso"), jobs_dir=JOBS)
    for b, clicks in enumerate(batches):
        land(ws.input_dir, b, iso_lines(clicks))
        ws.coordinator.inject()
    crash(ws, spark, "epoch.compute@2", "recover", "clicks_iso")
    kill_when(start(ws, "recover", "clicks_iso"), "] epoch 2:")
    cli_ok(ws, "recover", "clicks_iso", spark=spark)  # the recovery on the test's session: no third JVM
    assert ws.store.latest_completed("clicks_iso").checkpoint_id == 3
    windows, late = windows_of(batches)
    with ws.store.engine.connect() as c:
        dead = [json.loads(p)["id"] for (p,) in c.execute(text(
            "SELECT payload FROM dead_letters WHERE job = 'clicks_iso' AND segment = 'per_10_minutes'"))]
    found = window_sink(ws, "clicks_iso")
    summary(f"clicks_iso: a crash and a SIGKILL, {len(windows)} windows on ISO-8601 times, {len(late)} late clicks: "
            f"sink = reference {found == Counter({(u, s, s + WINDOW): n for (u, s), n in windows.items()})}")
    assert found == Counter({(u, start, start + WINDOW): n for (u, start), n in windows.items()})
    assert sorted(dead) == sorted(late)
    assert "checkpoint 3 verified" in cli_ok(ws, "verify", "clicks_iso", spark=spark)
