"""A dead letter is storable whatever bytes its record held, on both catalogs: NUL (which PostgreSQL's text
refuses), bytes that are not UTF-8, a 2 MB line, CR and LF oddities, a UTF-8 BOM. For every format whose
lines become dead letters at inject, `absreplay inject` exits 0, the next one too, and each dead letter's
bytes read back (SQL and ``coordinator.catalog.audit``) equal the first bytes of its line, while its
``payload`` stays readable text."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

from coordinator.dataflow import discovery as job_discovery
from coordinator.catalog import audit
from coordinator.catalog.db import make_engine
from coordinator.catalog.models import DeadLetter, dead_letter_columns, record_bytes, storable_text
from coordinator.checkpoints.store import CheckpointStore
from coordinator.sources.segment_reader import PAYLOAD_PREVIEW
from tests.helpers import ABSREPLAY, cli, make_workspace

JOB_FILE = '''
import absreplay.api as abs


def word(line):
    # the reason repeats the line, NUL and all: a reason is storable whatever a check returns
    return None if line.isalpha() else f"not a word: {line.decode('utf-8')}"


def job(name, fmt, key, key_type):
    j = abs.Job(name, parallelism=1)
    j.source("in", fmt).key_by(key, key_type).aggregate("n", n=abs.count()).sink("out", abs.SqlTable(f"{name}_n"))
    return j


text = job("text", abs.TextLines(), "line", str)
checked = job("checked", abs.TextLines(check=word), "line", str)
envelope = job("envelope", abs.TextLines(id_envelope=".jsonl"), "line", str)
clicks = job("clicks", abs.json_lines({"id": str, "ts": int, "user": int, "page": str}, time="ts", id="id"),
             "user", int)
rows = job("rows", abs.csv({"user": int, "page": str}), "user", int)
table = job("table", abs.parquet({"user": int, "page": str}), "user", int)
'''

BOM = b"\xef\xbb\xbf"
#: a line over the 1 MiB maximum with a NUL among the bytes its dead letter keeps
LONG = b"\x00" + b"y" * (2 << 20)


def envelope(rid: str, body: bytes) -> bytes:
    return b'{"id": "%s", "ts": 1, "line": "%s"}' % (rid.encode(), body)


def click(rid: str, page: bytes) -> bytes:
    return b'{"id": "%s", "ts": 1000, "user": 1, "page": "%s"}' % (rid.encode(), page)


#: per job: its segment's name and lines, each with whether inject makes it a dead letter
CASES: dict[str, tuple[str, list[tuple[bytes, bool]]]] = {
    "text": ("seg-0001", [
        (b"\x00", False),  # NUL is UTF-8: a text record
        (b"\x00\xff", True),
        (b"\xff", True),
        (b"caf\xc3", True),  # a multibyte character cut short
        (b"\xe2\x82", True),
        (LONG, True),
        (b"a\rb", False),
        (b"\r", False),
        (BOM + b"hello", False),
        (b"", False),
    ]),
    "checked": ("seg-0001", [
        (b"hello", False),
        (b"\x00", True),
        (b"he\x00llo", True),
        (b"\xff", True),
        (b"a\r", True),  # a CRLF line ending
        (b"\r", True),
        (BOM + b"hello", True),
        (LONG, True),
    ]),
    "envelope": ("seg-0001.jsonl", [
        (b"\x00", True),
        (envelope("e1", b"a\x00b"), True),  # NUL inside otherwise valid JSON
        (envelope("e2", b"ok") + b"\r", False),  # CRLF: JSON allows the CR as whitespace
        (envelope("e2", b"ok") + b"\r", True),  # its copy: a duplicate id, its payload read from the file
        (envelope("e3", b"caf\xc3"), True),
        (b"\xff", True),
        (BOM + envelope("e4", b"ok"), True),
        (envelope("e5", LONG), True),
        (envelope("e6", b"a\\u0000b"), False),  # an escaped NUL is a JSON string like any other
    ]),
    "clicks": ("seg-0001.jsonl", [
        (b"\x00", True),
        (click("j1", b"a\x00b"), True),
        (click("j2", b"a") + b"\x00", True),
        (click("j3", b"caf\xc3"), True),
        (b"\xff", True),
        # Python's json reads past a BOM and reads UTF-16 when given bytes; Spark reads nulls from both
        (BOM + click("j4", b"a"), True),
        ('{"id": "j5", "ts": 1000, "user": 1, "page": "a"}'.encode("utf-16-le"), True),
        (click("j6", b"a") + b"\r", False),
        (click("j6", b"a") + b"\r", True),
        (click("j7", b"a") + b'\r{"id": "j8"}', True),
        (click("j9", LONG), True),
        (click("j10", b"a\\u0000b"), False),
    ]),
    "rows": ("seg-0001", [
        (b"\x00", True),
        (b"1,a\x00b", False),  # NUL in a string field: a record
        (b"\x001,a", True),
        (b"1,caf\xc3", True),
        (b"\xff", True),
        (BOM + b"1,a", True),
        (b"1,a\r", False),
        (b"1," + LONG, True),
    ]),
}


@pytest.fixture
def env(tmp_path: Path, catalog_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "formats.py").write_text(JOB_FILE)
    monkeypatch.setenv("ABS_JOBS_DIR", str(folder))
    monkeypatch.setattr(job_discovery, "_FOUND", {})
    return {"ABS_DATABASE_URL": catalog_url, "ABS_HOME": str(tmp_path / "home"), "ABS_JOBS_DIR": str(folder)}


def land(env: dict[str, str], job: str, name: str, data: bytes) -> None:
    path = Path(env["ABS_HOME"]) / "data" / job / "input" / "p0" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_name(".landing").write_bytes(data)
    os.replace(path.with_name(".landing"), path)


def inject(env: dict[str, str], job: str, barrier: int) -> str:
    r = cli(None, "inject", job, env=env)
    assert r.code == 0 and "Traceback" not in r.err, r.out + r.err
    assert f"{job}: barrier {barrier} injected" in r.out
    return r.out


def stored(env: dict[str, str], job: str) -> dict[int, tuple[str, bytes | None]]:
    """Each dead letter of ``job`` by offset: (payload, payload_bytes), as plain SQL reads them."""
    with make_engine(env["ABS_DATABASE_URL"]).connect() as c:
        return {o: (p, None if b is None else bytes(b)) for o, p, b in c.execute(text(
            'SELECT "offset", payload, payload_bytes FROM dead_letters WHERE job = :job'), {"job": job})}


@pytest.mark.parametrize("job", sorted(CASES))
def test_dead_letters_of_any_bytes_are_stored_and_read_back_exactly(env, job: str) -> None:
    name, lines = CASES[job]
    land(env, job, name, b"".join(line + b"\n" for line, _ in lines))
    out = inject(env, job, 1)
    dead = {i: line[:PAYLOAD_PREVIEW] for i, (line, is_dead) in enumerate(lines) if is_dead}
    assert f"{len(dead)} dead letters" in out

    rows = stored(env, job)
    assert {o: record_bytes(p, b) for o, (p, b) in rows.items()} == dead
    for o, (payload, exact) in rows.items():
        assert "\x00" not in payload  # readable: a NUL or an undecodable byte is an escape
        # the bytes are stored apart exactly when the text cannot be the record itself
        clean = b"\x00" not in dead[o] and dead[o].decode("utf-8", "replace").encode() == dead[o]
        assert (exact is None) == clean and (not clean or payload == dead[o].decode())
    detail = audit.checkpoint_detail(make_engine(env["ABS_DATABASE_URL"]), job, 1)
    assert {d.offset: d.record for d in detail.dead_letters} == dead
    assert all("\x00" not in d.reason for d in detail.dead_letters)

    # the next inject registers the next segment, its dead letters too: nothing stays stuck on the first
    land(env, job, name.replace("0001", "0002"), lines[-1][0] + b"\n\xff\x00\n")
    inject(env, job, 2)
    again = stored(env, job)
    assert {o: again[o] for o in dead} == rows
    assert record_bytes(*again[len(lines) + 1]) == b"\xff\x00"


def test_the_absreplay_command_injects_a_line_with_nul_twice(env) -> None:
    """The installed command, as a user runs it (the issue's exit 1 and traceback came from it)."""
    run_env = {**os.environ, **env}
    land(env, "clicks", "seg-0001", click("n1", b"a\x00b") + b"\n")
    for barrier in (1, 2):
        done = subprocess.run([ABSREPLAY, "inject", "clicks"], env=run_env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
        assert f"clicks: barrier {barrier} injected" in done.stdout
    assert [record_bytes(*r) for r in stored(env, "clicks").values()] == [click("n1", b"a\x00b")]


def test_a_checks_reason_with_nul_is_kept_readable(env) -> None:
    land(env, "checked", "seg-0001", b"he\x00llo\n")
    inject(env, "checked", 1)
    [letter] = audit.checkpoint_detail(make_engine(env["ABS_DATABASE_URL"]), "checked", 1).dead_letters
    assert letter.reason == "not a word: he\\x00llo"
    assert (letter.payload, letter.payload_bytes, letter.record) == ("he\\x00llo", b"he\x00llo", b"he\x00llo")


def test_a_parquet_rows_dead_letter_keeps_a_nul_in_its_json(env) -> None:
    path = Path(env["ABS_HOME"]) / "data" / "table" / "input" / "p0" / "seg-0001.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"user": pa.array([None, 2], pa.int64()), "page": ["a\x00b", "c"]}), path)
    inject(env, "table", 1)
    [(payload, exact)] = stored(env, "table").values()
    assert json.loads(record_bytes(payload, exact)) == {"user": None, "page": "a\x00b"}


#: every byte alone, inside text, and the sequences that are not UTF-8 or hold NUL
RECORDS = [bytes([b]) for b in range(256)] + [b"a" + bytes([b]) + b"z" for b in range(256)] + [
    b"", b"\x00" * PAYLOAD_PREVIEW, b"caf\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\\x00\x00", b"\\xff\xff",
    BOM + b"{}", "é€😀".encode(), "é€😀".encode()[:-1], b"\r\n\r", b"a\\b"]


def test_every_byte_round_trips_through_either_catalog(env) -> None:
    store = CheckpointStore(make_engine(env["ABS_DATABASE_URL"]))
    store.register_job(job_discovery.get_job("text"))
    with store.sessions.begin() as s:
        s.add_all(DeadLetter(job="text", checkpoint_id=1, partition="p0", segment="seg", offset=i,
                             **dead_letter_columns("why", r)) for i, r in enumerate(RECORDS))
    with store.sessions() as s:
        back = {d.offset: (d.record, d.payload) for d in s.query(DeadLetter)}
    assert [back[i][0] for i in range(len(RECORDS))] == RECORDS
    # the readable text is the record itself whenever it is UTF-8 without NUL
    assert back[ord("a")][1] == "a" and back[256 + 0][1] == "a\\x00z" and back[255][1] == "\\xff"
    # plain SQL gets the exact bytes as docs/jobs.md says (Dead letters)
    as_bytes = "convert_to(payload, 'UTF8')" if store.engine.dialect.name == "postgresql" else "CAST(payload AS BLOB)"
    with store.engine.connect() as c:
        exact = dict(c.execute(text(f'SELECT "offset", COALESCE(payload_bytes, {as_bytes}) FROM dead_letters')).all())
    assert [bytes(exact[i]) for i in range(len(RECORDS))] == RECORDS


def test_storable_text_escapes_nul_and_what_is_not_utf8_and_keeps_the_rest() -> None:
    assert storable_text(b"a\x00b\xffc\xc3") == "a\\x00b\\xffc\\xc3"
    assert storable_text("caf\u00e9 \ufeff\r\n") == "caf\u00e9 \ufeff\r\n"
    assert storable_text("lone \udcff, nul \x00") == "lone \\udcff, nul \\x00"
    assert dead_letter_columns("r\x00", b"ok") == {"reason": "r\\x00", "payload": "ok", "payload_bytes": None}
    assert dead_letter_columns("r", b"\\x00")["payload_bytes"] is None  # text that looks like an escape is text
    assert dead_letter_columns("r", b"\x00")["payload_bytes"] == b"\x00"


@pytest.mark.sink_unchecked("judged here: each user's clicks")
def test_csv_lines_with_crs_are_read_by_spark_as_inject_read_them(tmp_path: Path, sqlite_url: str, spark,
                                                                  monkeypatch) -> None:
    """A CRLF line ending is no part of a CSV record's last field; a CR or a space beside a number makes it no
    number for Spark, so inject makes its line a dead letter rather than a record Spark reads a null from."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "formats.py").write_text(JOB_FILE.replace('abs.csv({"user": int, "page": str})',
                                                        'abs.csv({"page": str, "user": int})'))
    monkeypatch.setattr(job_discovery, "_FOUND", {})
    monkeypatch.setenv("ABS_JOBS_DIR", str(folder))
    ws = make_workspace(tmp_path, sqlite_url, job_discovery.get_job("rows"), jobs_dir=str(folder))
    lines = [b"a,1\r", b"b,2", b"c,1\r\r", b"d,3 ", b"e, 3", b"f,3\r\r\r", b"g,1_0", b"h,\r3"]
    (ws.input_dir / "p0").mkdir(parents=True)
    (ws.input_dir / "p0" / "seg-0001").write_bytes(b"".join(line + b"\n" for line in lines))
    ws.epoch(spark)
    with ws.store.engine.connect() as c:
        counts = dict(c.execute(text('SELECT "user", n FROM rows_n')).all())
        dead = [o for (o,) in c.execute(text('SELECT "offset" FROM dead_letters ORDER BY "offset"'))]
    assert counts == {1: 2, 2: 1, 3: 1}
    assert dead == [3, 4, 6, 7]
