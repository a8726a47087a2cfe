"""Event time as timestamps, without Spark: inject's plain-Python reading of ISO-8601 strings
(coordinator.sources.event_time), the JSON-lines, CSV and Parquet checks that use it, the id store's
event time from it, and the declarations. tests/sources/test_event_time_spark.py checks the same strings against
Spark itself."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

import absreplay.api as abs
from coordinator.errors import SourceError
from coordinator.sources.event_time import TimestampError, event_time_ms, timestamp_micros
from coordinator.sources.source import IdRecord, scan_parquet, scan_segment
from coordinator.types import ddl

T = 1_795_600_800_000  # 2026-11-25T10:00:00Z in epoch ms
HOUR = 3_600_000

#: (string, epoch ms) that Spark and inject read alike
ACCEPTED = [
    ("2026-11-25T10:00:00Z", T),
    ("2026-11-25T10:00:00.123Z", T + 123),
    ("2026-11-25T10:00:00.123+01:00", T + 123 - HOUR),
    ("2026-11-25T10:00:00", T),  # no zone: the session time zone, UTC
    ("2026-11-25 10:00:00", T),
    ("2026-11-25 10:00:00.5", T + 500),
    ("2026-11-25T10:00:00.1234567", T + 123),  # beyond microseconds: truncated
    ("2026-11-25T10:00:00.", T),
    ("2026-11-25T10:00", T),
    ("2026-11-25T10", T),
    ("2026-11-25", T - 10 * HOUR),  # a date alone: its midnight
    ("2026-11", T - 10 * HOUR - 24 * 24 * HOUR),
    ("2026-1-5T1:2:3", 1_767_574_923_000),
    ("2026-11-25T10:00:00+0100", T - HOUR),
    ("2026-11-25T10:00:00+01", T - HOUR),
    ("2026-11-25T10:00:00+1:00", T - HOUR),
    ("2026-11-25T10:00:00-05:30", T + 5 * HOUR + HOUR // 2),
    ("2026-11-25T10:00:00+01:00:30", T - HOUR - 30_000),
    ("2026-11-25T10:00:00 +01:00", T - HOUR),
    ("2026-11-25T10:00:00 Z", T),
    ("2026-11-25T10:00:00UTC", T),
    ("2026-11-25T10:00:00 UTC+01:00", T - HOUR),
    ("2026-11-25T10:00:00GMT+01:00", T - HOUR),
    ("2026-11-25T10:00:00UT+1", T - HOUR),
    ("2026-11-25T10:00:00+18:00", T - 18 * HOUR),
    (" 2026-11-25T10:00:00Z\t", T),
    ("+2026-11-25T10:00:00", T),
    ("1969-12-31T23:59:59.999Z", -1),  # floored to the millisecond, as Spark's unix_millis
]
#: strings Spark reads no timestamp from either
NOT_TIMESTAMPS = ["", "abc", "2026-11-25t10:00:00", "2026-11-25T24:00:00", "2026-11-25T10:60:00", "2026-02-29",
                  "2026-13-01", "2026-11-25T10:00:00,5", "2026-11-25T", "202611-25", "2026-11-25T10:00:00z",
                  "2026-11-25T10:00:00+25:00", "2026-11-25T10:00Z", "2026-11-25T10:00:00utc", "1234567-01-01"]
#: strings Spark reads, that inject refuses, and why: reading them again would not give the same instant
REFUSED = {"10:00:00": "a time without a date", "T10:00:00": "a time without a date",
           "2026-11-25T10:00:00 Europe/Paris": "named time zone", "2026-11-25T10:00:00EST": "named time zone",
           "2026-11-25T10:00:00Zulu": "named time zone"}


@pytest.mark.parametrize(("text", "ms"), ACCEPTED)
def test_iso_strings_are_read_as_spark_reads_them(text, ms) -> None:
    assert event_time_ms(text, "timestamp") == ms


@pytest.mark.parametrize("text", NOT_TIMESTAMPS)
def test_strings_spark_reads_no_timestamp_from_are_refused(text) -> None:
    with pytest.raises(TimestampError):
        timestamp_micros(text)


@pytest.mark.parametrize(("text", "why"), REFUSED.items())
def test_a_time_without_a_date_and_named_zones_are_refused_with_the_reason(text, why) -> None:
    with pytest.raises(TimestampError, match=why):
        timestamp_micros(text)


def test_numbers_in_a_timestamp_field_are_refused_and_epoch_ms_fields_stay_integers() -> None:
    with pytest.raises(TimestampError, match="epoch seconds"):
        event_time_ms(1_795_600_800, "timestamp")
    assert event_time_ms(T, "long") == T
    with pytest.raises(TimestampError):
        event_time_ms("2026-11-25T10:00:00Z", "long")


@given(st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31)),
       st.integers(-18 * 60, 18 * 60), st.sampled_from(["T", " "]), st.integers(0, 6))
def test_full_iso_date_times_are_the_instant_python_reads(when, offset_minutes, sep, fraction) -> None:
    """An independent oracle: Python's own ISO-8601 reading, for the strings both understand."""
    zone = dt.timezone(dt.timedelta(minutes=offset_minutes))
    text = when.replace(tzinfo=zone).isoformat(sep=sep, timespec="microseconds")
    cut = len(text) - 6 - (6 - fraction) - (1 if fraction == 0 else 0)  # drop fraction digits (and the dot)
    text = text[:cut] + text[-6:]
    expected = dt.datetime.fromisoformat(text)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    assert timestamp_micros(text) == (expected - epoch) // dt.timedelta(microseconds=1)


def test_json_lines_with_iso_time_check_every_line_with_a_one_line_reason() -> None:
    fmt = abs.json_lines({"user": str, "ts": dt.datetime}, time="ts")
    assert fmt.fields == (("user", "string"), ("ts", "timestamp"))
    assert fmt.problem(b'{"user":"a","ts":"2026-11-25T10:00:00.123+01:00"}') is None
    assert fmt.problem(b'{"user":"a","ts":"2026-11-25T10:00:00Z"}') is None
    assert fmt.problem(b'{"user":"a","ts":"2026-11-25T10:00:00"}') is None
    bad = fmt.problem(b'{"user":"a","ts":"2026-11-25T25:00:00Z"}')
    assert bad.startswith("field 'ts' is not a timestamp (") and "'2026-11-25T25:00:00Z'" in bad
    assert "\n" not in bad
    assert "epoch seconds" in fmt.problem(b'{"user":"a","ts":1795600800}')
    assert "a time without a date" in fmt.problem(b'{"user":"a","ts":"10:00:00"}')
    assert fmt.problem(b'{"user":"a"}') == "field 'ts' is missing"
    assert abs.json_lines({"user": str, "ts": "timestamp"}, time="ts") == fmt


def test_csv_with_iso_time() -> None:
    fmt = abs.csv({"user": str, "ts": "timestamp", "n": int}, time="ts")
    assert fmt.problem(b"a,2026-11-25 10:00:00.5,3") is None
    assert fmt.problem(b"a,2026-11-25T10:00:00-05:30,3\r") is None
    assert fmt.problem(b"a,2026-11-25,3") is None
    assert fmt.problem(b"a,2026-11-25T10:00:00 Europe/Paris,3").startswith(
        "field 'ts' is not a timestamp (a named time zone (Europe/Paris)")
    assert fmt.problem(b"a,,3").startswith("field 'ts' is not a timestamp (")
    assert fmt.problem(b"a,2026-11-25,x") == "field 'n' is not a long: 'x'"


def test_a_time_field_is_declared_as_epoch_ms_or_as_a_timestamp() -> None:
    assert ddl(dt.datetime) == "timestamp"
    for declare in (abs.json_lines, abs.csv, abs.parquet):
        declare({"ts": int}, time="ts")
        declare({"ts": dt.datetime}, time="ts")
        with pytest.raises(ValueError, match="time field 'ts': declare it among the fields as int"):
            declare({"ts": str}, time="ts")
        with pytest.raises(ValueError, match="time field 'at'"):
            declare({"ts": dt.datetime}, time="at")


def test_the_id_store_gets_the_instant_of_an_iso_time(tmp_path) -> None:
    fmt = abs.json_lines({"id": str, "ts": dt.datetime}, time="ts", id="id")
    seg = tmp_path / "p0" / "seg-0000.jsonl"
    seg.parent.mkdir()
    seg.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "a", "ts": "2026-11-25T10:00:00.999+01:00"}, {"id": "b", "ts": "2026-11-25 10:00:00"},
        {"id": "c", "ts": "2026-11-25T10:00:00 Europe/Paris"}, {"id": "d", "ts": "1969-12-31T23:59:59Z"}]))
    scanned = scan_segment("p0", seg, fmt)
    assert scanned.id_records == [IdRecord(0, "a", (T - HOUR) // 1000), IdRecord(1, "b", T // 1000)]
    assert [(b.offset_in_segment, b.reason.split(" (")[0]) for b in scanned.bad_records] == [
        (2, "field 'ts' is not a timestamp"), (3, "time field 'ts' must be a non-negative epoch time in ms")]


def _parquet(path, column: pa.Array, **options) -> None:
    pq.write_table(pa.table({"k": pa.array(["a"] * len(column)), "ts": column}), path, **options)


def test_parquet_timestamp_columns_spark_reads_are_accepted_and_nanoseconds_refused(tmp_path) -> None:
    fmt = abs.parquet({"k": str, "ts": dt.datetime}, time="ts")
    when = dt.datetime(2026, 11, 25, 10, 0, 0, 123456, tzinfo=dt.timezone.utc)
    for name, t in [("us_utc", pa.timestamp("us", tz="UTC")), ("ms_paris", pa.timestamp("ms", tz="Europe/Paris")),
                    ("us_naive", pa.timestamp("us"))]:
        path = tmp_path / f"{name}.parquet"
        _parquet(path, pa.array([when if t.tz else when.replace(tzinfo=None), None], t))
        scanned = scan_parquet("p0", path, fmt)
        assert (scanned.records, [b.offset_in_segment for b in scanned.bad_records]) == (2, [1]), name
    int96 = tmp_path / "int96.parquet"
    _parquet(int96, pa.array([when], pa.timestamp("ns", tz="UTC")), use_deprecated_int96_timestamps=True)
    assert scan_parquet("p0", int96, fmt).records == 1
    nanos = tmp_path / "nanos.parquet"
    _parquet(nanos, pa.array([when], pa.timestamp("ns", tz="UTC")))
    with pytest.raises(SourceError, match="column 'ts' holds timestamps in nanoseconds.*coerce_timestamps='us'"):
        scan_parquet("p0", nanos, fmt)
    ints = tmp_path / "ints.parquet"
    _parquet(ints, pa.array([T], pa.int64()))
    with pytest.raises(SourceError, match="column 'ts' is int64, the job declares timestamp"):
        scan_parquet("p0", ints, fmt)
