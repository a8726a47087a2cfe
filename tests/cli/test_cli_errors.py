"""Bad input through the command line: exit code 2, one line naming the problem, nothing written.

The first test runs the installed `absreplay` executable; the others call the same entry point
in this process (tests.helpers.cli), which prints and exits exactly as the executable does."""

from __future__ import annotations

import importlib
import json
import os
import subprocess

import pytest

from sqlalchemy import create_engine, text

from coordinator.catalog.db import parse_url
from coordinator.checkpoints import recovery
from tests.helpers import ABSREPLAY, CliResult, cli, cli_ok, make_workspace, one_line_error, patched_env


def absreplay(*args: str, env: dict[str, str]) -> CliResult:
    return cli(None, *args, env=env)


def count_rows(url: str, table: str) -> int:
    with create_engine(parse_url(url)).connect() as c:
        return c.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one()


def test_unknown_job_as_typed(tmp_path, sqlite_url) -> None:
    r = subprocess.run([ABSREPLAY, "inject", "nosuchjob"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "ABS_DATABASE_URL": sqlite_url, "ABS_HOME": str(tmp_path)})
    one_line_error(CliResult(r.returncode, r.stdout, r.stderr), "unknown job 'nosuchjob'")
    assert count_rows(sqlite_url, "jobs") == 0


def test_malformed_database_url(tmp_path) -> None:
    r = absreplay("inject", "wordcount", env={"ABS_DATABASE_URL": "not a url", "ABS_HOME": str(tmp_path)})
    one_line_error(r, "ABS_DATABASE_URL is malformed")


def test_unsupported_database(tmp_path) -> None:
    r = absreplay("jobs", env={"ABS_DATABASE_URL": "mysql://x@localhost/db", "ABS_HOME": str(tmp_path)})
    one_line_error(r, "supported: sqlite, postgresql")


def test_unreachable_database_does_not_show_the_password(tmp_path) -> None:
    url = "postgresql://postgres:s3cret@127.0.0.1:1/nowhere"
    r = absreplay("inject", "wordcount", env={"ABS_DATABASE_URL": url, "ABS_HOME": str(tmp_path)})
    one_line_error(r, "unreachable")
    assert "s3cret" not in r.err + r.out


def test_catalog_without_schema_says_to_upgrade(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    r = absreplay("checkpoints", "wordcount", env={"ABS_DATABASE_URL": url, "ABS_HOME": str(tmp_path)})
    one_line_error(r, "absreplay db upgrade")


def test_partition_that_is_a_file_writes_nothing(tmp_path, pg_url) -> None:
    env = {"ABS_DATABASE_URL": pg_url, "ABS_HOME": str(tmp_path), "ABS_DATA_DIR": str(tmp_path / "data")}
    inp = tmp_path / "data" / "wordcount" / "input"
    (inp / "p0").mkdir(parents=True)
    (inp / "p0" / "seg-1.txt").write_text("hello world\n")
    (inp / "p1").write_text("I should be a directory")
    r = absreplay("inject", "wordcount", env=env)
    one_line_error(r, "is a file")
    assert count_rows(pg_url, "checkpoints") == 0
    assert count_rows(pg_url, "source_segments") == 0


def test_bad_snapshot_mode_and_cycles(tmp_path, sqlite_url) -> None:
    env = {"ABS_DATABASE_URL": sqlite_url, "ABS_HOME": str(tmp_path)}
    one_line_error(absreplay("process", "wordcount", "--snapshot-mode", "fast", env=env), "--snapshot-mode")
    r = absreplay("run", "wordcount", "--cycles", "0", env=env)
    assert r.code == 2 and "cycles" in r.err
    assert count_rows(sqlite_url, "checkpoints") == 0


def test_inject_and_checkpoints_json(tmp_path, sqlite_url) -> None:
    env = {"ABS_DATABASE_URL": sqlite_url, "ABS_HOME": str(tmp_path), "ABS_DATA_DIR": str(tmp_path / "data")}
    part = tmp_path / "data" / "wordcount" / "input" / "p0"
    part.mkdir(parents=True)
    (part / "seg-1.txt").write_text("a b c\n")
    r = absreplay("inject", "wordcount", env=env)
    assert r.code == 0 and "barrier 1 injected" in r.out and "p0@1" in r.out
    r = absreplay("checkpoints", "wordcount", "--json", env=env)
    assert r.code == 0
    (row,) = json.loads(r.out)  # one document: the array of rows
    assert (row["checkpoint_id"], row["status"], row["total_tasks"]) == (1, "PENDING", 8)
    r = absreplay("checkpoints", "wordcount", "--jsonl", env=env)
    assert r.code == 0 and [json.loads(line) for line in r.out.splitlines()] == [row]
    one_line_error(absreplay("checkpoints", "wordcount", "--json", "--jsonl", env=env), "--json and --jsonl")


def test_recoveries_as_one_document_and_a_table_that_keeps_the_whole_detail(tmp_path, sqlite_url) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    detail = ("state file file:///state/wordcount/chk-1/count/1/" + "x" * 150 + ".parquet is missing: "
              "recover with --fallback to step back to the previous completed checkpoint")
    rid = recovery.start(ws.store, "wordcount", recovery.RecoveryKind.RECOVER, recovery.RecoveryMode.FULL, None)
    recovery.finish(ws.store, rid, recovery.RecoveryResult.FAILED, detail=detail)
    (row,) = json.loads(cli_ok(ws, "recoveries", "wordcount", "--json"))
    assert (row["id"], row["result"], row["detail"]) == (rid, "FAILED", detail)
    (line,) = cli_ok(ws, "recoveries", "wordcount", "--jsonl").splitlines()
    assert json.loads(line) == row
    table = cli_ok(ws, "recoveries", "wordcount")
    # the detail column's cells, top to bottom: wrapped and folded, never cut
    cells = [ln.split("│")[-2].strip() for ln in table.splitlines() if ln.count("│") == 11]
    assert "".join(cells).replace(" ", "").endswith(detail.replace(" ", ""))


def test_restore_from_a_checkpoint_that_does_not_exist(tmp_path, sqlite_url) -> None:
    env = {"ABS_DATABASE_URL": sqlite_url, "ABS_HOME": str(tmp_path), "ABS_DATA_DIR": str(tmp_path / "data")}
    part = tmp_path / "data" / "wordcount" / "input" / "p0"
    part.mkdir(parents=True)
    (part / "seg-1.txt").write_text("a b c\n")
    assert absreplay("inject", "wordcount", env=env).code == 0
    one_line_error(absreplay("process", "wordcount", "--restore-from", "999", env=env),
                   "checkpoint 999 of job 'wordcount' does not exist")
    one_line_error(absreplay("process", "wordcount", "--restore-from", "1", env=env),
                   "checkpoint 1 of job 'wordcount' is PENDING, not COMPLETED")
    assert count_rows(sqlite_url, "task_acks") == 0


@pytest.mark.parametrize("change", ["deleted", "appended", "truncated", "rewritten"])
def test_a_registered_segment_that_changed_stops_processing_with_its_name(tmp_path, pg_url, spark, change) -> None:
    """Inject registered the segment with its size, checksum and mtime; whatever happened to it since
    (a same-size rewrite too) is named, exit 2, before anything is processed (no Spark traceback,
    nothing dropped or counted twice)."""
    from tests.helpers import make_workspace

    ws = make_workspace(tmp_path, pg_url)
    ws.land(0, lines=50)
    ws.coordinator.inject()
    seg = sorted((ws.input_dir / "p0").iterdir())[0]
    if change == "deleted":
        seg.unlink()
    elif change == "appended":
        seg.write_bytes(seg.read_bytes() + b"late words\n")
    elif change == "truncated":
        seg.write_bytes(seg.read_bytes()[:10])
    else:
        st = seg.stat()
        seg.write_bytes(seg.read_bytes()[::-1])
        os.utime(seg, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    r = cli(ws, "process", "wordcount", spark=spark)
    needle = "is gone" if change == "deleted" else "changed after inject"
    one_line_error(r, f"segment {seg} of epoch 1")
    assert needle in r.err
    assert ws.store.acks(ws.job.name, 1) == [] and ws.store.checkpoint(ws.job.name, 1).status == "PENDING"


# -- failures of what lies outside ABS Replay: one line, exit 1 (issue 10, item 9) -----------------
def one_line_failure(result: CliResult, *needles: str) -> str:
    lines = [ln for ln in result.err.strip().splitlines() if ln.strip()]
    assert result.code == 1, result.err + result.out
    assert "Traceback" not in result.err and len(lines) == 1, result.err
    assert all(n in lines[0] for n in needles), lines[0]
    return lines[0]


def test_a_locked_sqlite_catalog_is_one_line(tmp_path, sqlite_url) -> None:
    import sqlite3

    ws = make_workspace(tmp_path, sqlite_url)
    ws.land(0, lines=10)
    holder = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer that does not let go
    try:
        r = cli(ws, "inject", "wordcount", env={"ABS_SQLITE_BUSY_TIMEOUT_S": "0.3"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    one_line_failure(r, "stayed locked by another writer", "ABS_SQLITE_BUSY_TIMEOUT_S")
    assert ws.store.checkpoints("wordcount") == []


def test_a_catalog_path_under_a_file_is_one_line(tmp_path) -> None:
    (tmp_path / "plain").write_text("not a directory")
    r = absreplay("db", "upgrade", env={"ABS_HOME": str(tmp_path),
                                        "ABS_DATABASE_URL": f"sqlite:///{tmp_path}/plain/catalog.db"})
    one_line_failure(r, "file system:", str(tmp_path / "plain"))


def test_a_spark_failure_is_one_line(tmp_path, sqlite_url, spark, monkeypatch) -> None:
    """Spark cannot read an epoch (here: a segment removed behind the segment check's back)."""
    from spark_jobs.run.runner import EpochRunner

    ws = make_workspace(tmp_path, sqlite_url)
    ws.land(0, lines=10)
    ws.coordinator.inject()
    monkeypatch.setattr(EpochRunner, "check_segments", lambda self, plans: None)
    for seg in ws.input_dir.rglob("*"):
        if seg.is_file():
            seg.unlink()
    r = cli(ws, "process", "wordcount", spark=spark)
    one_line_failure(r, "Spark failed")


# -- numbers out of range: a usage error naming the option (exit 2), never a database overflow -----
TOO_BIG = str(2**63)  # one past the catalog's BIGINT
NUMBER_OPTIONS = [  # (the command and what it needs besides, the option given the number)
    (("process", "wordcount"), "--restore-from"),
    (("process", "wordcount"), "--parallelism"),
    (("run", "wordcount"), "--cycles"),
    (("run", "wordcount"), "--parallelism"),
    (("checkpoints", "wordcount"), "--limit"),
    (("recover", "wordcount"), "--checkpoint"),
    (("recover", "wordcount"), "--parallelism"),
    (("rewind", "wordcount"), "--to"),
    (("rewind", "wordcount", "--to", "1"), "--parallelism"),
    (("verify", "wordcount"), "--checkpoint"),
    (("state", "wordcount"), "--checkpoint"),
    (("state", "wordcount", "--checkpoint", "1"), "--limit"),
    (("diff", "wordcount", "--to", "2"), "--from"),
    (("diff", "wordcount", "--from", "1"), "--to"),
    (("diff", "wordcount", "--from", "1", "--to", "2"), "--limit"),
    (("demo", "--no-airflow"), "--batches"),
    (("demo", "--no-airflow"), "--lines-per-batch"),
]


@pytest.mark.parametrize("value", ["99999999999999999999", TOO_BIG, "-1"])
@pytest.mark.parametrize(("command", "option"), NUMBER_OPTIONS, ids=lambda p: " ".join(p) if isinstance(p, tuple) else p)
def test_a_number_out_of_range_is_one_line_naming_the_option(tmp_path, sqlite_url, command, option, value) -> None:
    r = absreplay(*command, option, value, env={"ABS_DATABASE_URL": sqlite_url, "ABS_HOME": str(tmp_path)})
    one_line_error(r, option)
    assert count_rows(sqlite_url, "jobs") == 0


def test_the_largest_checkpoint_id_is_looked_up(tmp_path, sqlite_url) -> None:
    """2**63-1 is in range: it reaches the catalog and is named as a checkpoint that does not exist."""
    r = absreplay("state", "wordcount", "--checkpoint", str(2**63 - 1),
                  env={"ABS_DATABASE_URL": sqlite_url, "ABS_HOME": str(tmp_path)})
    one_line_error(r, f"checkpoint {2**63 - 1} of job 'wordcount' does not exist")


def test_usage_errors_are_one_line_and_help_still_shows(tmp_path, sqlite_url) -> None:
    env = {"ABS_DATABASE_URL": sqlite_url, "ABS_HOME": str(tmp_path)}
    one_line_error(absreplay("state", "wordcount", env=env), "--checkpoint")
    one_line_error(absreplay("checkpoints", "wordcount", "--limit", "many", env=env), "--limit")
    one_line_error(absreplay("inject", env=env), "Missing argument 'job'")
    r = absreplay("state", "--help", env=env)
    assert r.code == 0 and "--checkpoint" in r.out
    r = absreplay(env=env)  # no command: the help, as before
    assert r.code == 2 and "inject" in r.out + r.err


APP_OPTIONS = [("process", "--restore-from"), ("process", "--checkpoint"), ("process", "--parallelism"),
               ("process", "--max-epochs"), ("verify", "--checkpoint")]


@pytest.mark.parametrize("value", ["99999999999999999999", "-1"])
@pytest.mark.parametrize(("app", "option"), APP_OPTIONS)
def test_the_spark_applications_refuse_a_number_out_of_range(tmp_path, sqlite_url, capsys, app, option,
                                                              value) -> None:
    """The applications spark-submit runs bound their numbers too (one line, exit 2, before Spark)."""
    with patched_env({"ABS_DATABASE_URL": sqlite_url, "ABS_HOME": str(tmp_path)}):
        code = importlib.import_module(f"spark_jobs.{app}").run(["wordcount", option, value])
    one_line_error(CliResult(code, "", capsys.readouterr().err), option)
