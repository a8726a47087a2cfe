"""Event times in plain Python, read exactly as Spark reads them: the one parser inject, the id store and
the plain-Python references use (``spark_jobs.records.event_time`` is the Spark side).

A field declared ``long``/``int`` is epoch milliseconds. A field declared ``timestamp`` is, in JSON lines
and CSV, a string Spark's JSON and CSV readers accept for a timestamp without a ``timestampFormat``: a
cast from string (``SparkDateTimeUtils.parseTimestampString`` / ``stringToTimestamp``), then the same
again with every ``GMT`` removed (``cleanLegacyTimestampStr``). That is ``[+-]yyyy[yy][-[m]m[-[d]d]]``,
optionally followed by ``T`` or a space and ``[h]h:[m]m[:[s]s[.fraction]]`` (or ``[h]h``), then an
optional zone; surrounding whitespace is ignored, a fraction beyond microseconds is truncated. The zone:
``Z``, an offset (``+01:00``, ``+0100``, ``+01``, ``+1:00``, ``-05:30:15``, up to 18 hours), ``UTC``,
``GMT`` or ``UT`` alone or followed by an offset. Without a zone the time is read in the session time
zone, ``SESSION_TIME_ZONE`` (UTC: ``spark_jobs.session`` sets it on every Spark session).

Two kinds of strings Spark reads are refused here (the record becomes a dead letter at inject, saying
why), because reading them again would not give the same instant: a time without a date (Spark takes
*today's* date), and a named zone (``Europe/Paris``, ``EST``, ``Zulu``: its rules are Java's tz database,
which plain Python cannot promise to share). A JSON number in a timestamp field is refused too (Spark
reads it as epoch *seconds*; epoch milliseconds are declared ``int``).
"""

from __future__ import annotations

import re

#: the time zone of a timestamp without a zone, in Spark (``spark.sql.session.timeZone``) and here
SESSION_TIME_ZONE = "UTC"
#: Spark timestamps are microseconds in a signed 64-bit integer
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_MAX_OFFSET_SECONDS = 18 * 3600
_SINGLE_HOUR = re.compile(r"([+-])([0-9]):")
_SINGLE_MINUTE = re.compile(r"([+-])([0-9][0-9]):([0-9])$")
_REGION = re.compile(r"[A-Za-z][A-Za-z0-9~/._+-]+")


class TimestampError(ValueError):
    """Why a value is not a timestamp of the job (one line, for a dead letter)."""


def event_time_ms(value: object, ddl_type: str) -> int:
    """A record's event time in epoch milliseconds: ``value`` of a field declared ``ddl_type`` (``long``/
    ``int``: epoch ms as is; ``timestamp``: a string, read as Spark reads it). TimestampError says why not."""
    if ddl_type in ("long", "int"):
        if type(value) is not int:
            raise TimestampError(f"an integer (epoch ms) is expected, got {value!r}"[:200])
        return value
    if ddl_type != "timestamp":
        raise TimestampError(f"a field of type {ddl_type} is no event time")
    if type(value) is not str:
        raise TimestampError("a number is read by Spark as epoch seconds: write an ISO-8601 string, or declare "
                             "the field int for epoch milliseconds" if type(value) in (int, float)
                             else f"an ISO-8601 string is expected, got {value!r}"[:200])
    return timestamp_micros(value) // 1000  # floor, as Spark's unix_millis


def timestamp_micros(text: str) -> int:
    """``text`` as Spark's JSON and CSV readers read a timestamp: microseconds since the epoch (UTC)."""
    try:
        return _to_micros(text)
    except _NotSpark as first:
        if "GMT" not in text:
            raise TimestampError(str(first)) from None
        try:  # Spark's fallback for legacy strings such as 2000-01-01T00:00GMT+01:00
            return _to_micros(text.replace("GMT", ""))
        except _NotSpark:
            raise TimestampError(str(first)) from None


class _NotSpark(Exception):
    """Spark reads no timestamp from the string either (so its fallback is tried)."""


def _to_micros(text: str) -> int:
    """Spark's ``stringToTimestamp`` in the session time zone; _NotSpark where Spark reads nothing,
    TimestampError for what Spark reads but inject refuses (a time without a date, a named zone)."""
    parsed = _segments(text)
    if parsed is None:
        raise _NotSpark("not an ISO-8601 date or date-time")
    (year, month, day, hour, minute, second, micros), zone, just_time = parsed
    offset = 0 if zone is None else _zone_offset(zone)  # None: a named zone
    if not (hour <= 23 and minute <= 59 and second <= 59):
        raise _NotSpark(f"no such time of day: {hour}:{minute}:{second}")
    if just_time:
        raise TimestampError("a time without a date (Spark would take today's date): write the date too")
    if not (1 <= month <= 12 and 1 <= day <= _days_in_month(year, month)):
        raise _NotSpark(f"no such date: {year}-{month}-{day}")
    seconds = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - (offset or 0)
    total = seconds * 1_000_000 + micros
    if not (_LONG_MIN <= seconds * 1_000_000 <= _LONG_MAX and _LONG_MIN <= total <= _LONG_MAX):
        raise _NotSpark("out of the range of Spark timestamps")
    if offset is None:
        raise TimestampError(f"a named time zone ({zone.strip()}) is not read at inject, its rules could differ "
                             "from Spark's: write the offset (+01:00) or Z")
    return total


def _trimmed(text: str) -> tuple[int, int]:
    """Where ``text`` starts and ends without the whitespace and ISO control characters around it."""
    start, end = 0, len(text)
    while start < end and (text[start] <= " " or text[start] == "\x7f"):
        start += 1
    while end > start and (text[end - 1] <= " " or text[end - 1] == "\x7f"):
        end -= 1
    return start, end


def _valid_digits(segment: int, digits: int) -> bool:
    return (segment == 6 or (segment == 0 and 4 <= digits <= 6) or (segment == 7 and digits <= 2)
            or (segment not in (0, 6, 7) and 0 < digits <= 2))


def _segments(text: str) -> tuple[list[int], str | None, bool] | None:
    """Spark's ``parseTimestampString``, step for step: (year, month, day, hour, minute, second, micros),
    the zone's text, whether there is no date; None when Spark reads no timestamp."""
    segments = [1, 1, 1, 0, 0, 0, 0, 0, 0]
    i = value = digits = fraction_digits = 0
    j, end = _trimmed(text)
    if j == end:
        return None
    zone: str | None = None
    just_time = False
    sign: int | None = None
    if text[j] in "+-":
        sign = -1 if text[j] == "-" else 1
        j += 1

    def close(next_i: int) -> bool:
        nonlocal value, digits, i
        if not _valid_digits(i, digits):
            return False
        segments[i], value, digits, i = value, 0, 0, next_i
        return True

    while j < end:
        b = text[j]
        if "0" <= b <= "9":
            if i == 6:
                fraction_digits += 1
            if i != 6 or digits < 6:  # a fraction beyond microseconds is truncated
                value = value * 10 + ord(b) - 48
            digits += 1
        elif j == 0 and b == "T":
            just_time, i = True, i + 3
        elif i < 2:
            if b == "-":
                if not close(i + 1):
                    return None
            elif i == 0 and b == ":" and sign is None:
                just_time = True
                if not _valid_digits(3, digits):
                    return None
                segments[3], value, digits, i = value, 0, 0, 4
            else:
                return None
        elif i == 2:
            if b not in " T" or not close(3):
                return None
        elif i in (3, 4):
            if b != ":" or not close(i + 1):
                return None
        elif i in (5, 6):
            if b == "." and i == 5:
                if not close(6):
                    return None
            else:
                if not close(i + 1):
                    return None
                zone = text[j:end]
                j = end - 1
            if i == 6 and b != ".":
                i += 1
        elif i < len(segments) and b in ": ":
            if not close(i + 1):
                return None
        else:
            return None
        j += 1
    if not _valid_digits(i, digits) or i >= len(segments):
        return None
    segments[i] = value
    segments[6] *= 10 ** max(0, 6 - fraction_digits)
    segments[0] *= sign or 1
    return segments[:7], zone, just_time


def _zone_offset(zone: str) -> int | None:
    """The offset in seconds of a zone Spark accepts (``getZoneId``: ``ZoneId.of``); None for a named zone."""
    zone = zone.strip("".join(map(chr, range(33))))  # Java's String.trim
    zone = _SINGLE_HOUR.sub(r"\g<1>0\g<2>:", zone, count=1)
    zone = _SINGLE_MINUTE.sub(r"\1\2:0\3", zone, count=1)
    if zone == "Z" or zone in ("UTC", "GMT", "UT"):
        return 0
    if zone.startswith(("+", "-")):
        return _offset(zone)
    for prefix in ("UTC", "GMT", "UT"):
        if zone.startswith(prefix) and zone[len(prefix):len(prefix) + 1] in ("+", "-"):
            return _offset(zone[len(prefix):])
    if len(zone) <= 1 or not _REGION.fullmatch(zone):
        raise _NotSpark(f"no such time zone: {zone!r}")
    return None


def _offset(text: str) -> int:
    """Java's ``ZoneOffset.of``: +h, +hh, +hhmm, +hh:mm, +hhmmss, +hh:mm:ss, within 18 hours."""
    if len(text) == 2:
        text = text[0] + "0" + text[1]
    # where each two-digit number starts, and whether a colon precedes it
    layout = {3: ((1, False),), 5: ((1, False), (3, False)), 6: ((1, False), (4, True)),
              7: ((1, False), (3, False), (5, False)), 9: ((1, False), (4, True), (7, True))}.get(len(text))
    if layout is None or any((colon and text[at - 1] != ":") or not ("0" <= text[at] <= "9" and "0" <= text[at + 1] <= "9")
                             for at, colon in layout):
        raise _NotSpark(f"no such zone offset: {text!r}")
    hours, minutes, seconds = (*(int(text[at:at + 2]) for at, _ in layout), 0, 0)[:3]
    total = hours * 3600 + minutes * 60 + seconds
    if hours > 18 or minutes > 59 or seconds > 59 or total > _MAX_OFFSET_SECONDS:
        raise _NotSpark(f"no such zone offset: {text!r}")
    return -total if text[0] == "-" else total


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a date of the proleptic Gregorian calendar (any year, as java.time)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468
