"""A Delta table as a source: each table version is a segment, the version reached is the cut.

Appends over several barriers are read exactly once (a keyed count equals plain Python's, verify is
exact, also after a run killed mid-checkpoint); a row with a null field is a dead letter; a version that
overwrites or deletes is refused at inject naming the version and its operation, with nothing
registered; an OPTIMIZE (no data change) is an empty segment; a registered version whose file was
vacuumed is refused before a run reads it."""

from __future__ import annotations

import shutil
import signal
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from sqlalchemy import select, text

import absreplay.api as abs
from coordinator.dataflow.discovery import get_job
from coordinator.catalog.models import DeadLetter, SourceSegment
from coordinator.checkpoints import run_plan
from coordinator.errors import SourceError
from coordinator.sources import delta_source
from tests.helpers import Workspace, cli, cli_ok, kill_when, make_workspace, one_line_error, start

SCHEMA = pa.schema([("customer", pa.string()), ("amount", pa.int64()), ("note", pa.string())])


def append(uri: Path, rows: list[dict]) -> None:
    write_deltalake(str(uri), pa.Table.from_pylist(rows, schema=SCHEMA), mode="append")


def orders(batch: int, n: int) -> list[dict]:
    return [{"customer": f"u{(batch * 7 + i) % 5}", "amount": batch * 100 + i, "note": "x"} for i in range(n)]


def segments(ws: Workspace) -> list[tuple[str, str, int, int]]:
    with ws.store.sessions() as s:
        return [(r.partition, r.name, r.first_offset, r.records) for r in s.scalars(
            select(SourceSegment).where(SourceSegment.job == ws.job.name).order_by(SourceSegment.first_offset,
                                                                                   SourceSegment.name))]


def refused(ws: Workspace) -> str:
    """inject stops with a SourceError and registers nothing; its message."""
    before = (ws.store.job(ws.job.name).last_checkpoint_id, segments(ws))
    with pytest.raises(SourceError) as exc:
        ws.coordinator.inject()
    assert (ws.store.job(ws.job.name).last_checkpoint_id, segments(ws)) == before
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_versions_are_segments_and_rewrites_are_refused(tmp_path: Path, sqlite_url: str) -> None:
    table = tmp_path / "orders"
    job = abs.Job("delta_plan")
    (job.source("orders", abs.delta_source(str(table), {"customer": str, "amount": int}))
        .key_by("customer", str).aggregate("per_user", n=abs.count())
        .sink("out", abs.SqlTable("delta_plan_counts")))
    ws = make_workspace(tmp_path, sqlite_url, job.definition())

    append(table, orders(0, 3))                       # version 0
    append(table, orders(1, 2) + [{"customer": "u9", "amount": None, "note": "y"}])  # version 1: a null amount
    assert ws.coordinator.inject().checkpoint_id == 1
    assert segments(ws) == [("table", f"{0:020d}", 0, 3), ("table", f"{1:020d}", 3, 3)]
    with ws.store.sessions() as s:
        dead = [(d.segment, d.offset, d.reason) for d in s.scalars(select(DeadLetter))]
    assert dead == [(f"{1:020d}", 5, "field(s) amount are null")]
    assert ws.store.cut("delta_plan", 1) == {"table": 6}

    # nothing new: an empty barrier; then an OPTIMIZE (the same rows in other files) and an append
    assert ws.coordinator.inject().checkpoint_id == 2
    assert ws.store.cut("delta_plan", 2) == {"table": 6}
    DeltaTable(str(table)).optimize.compact()         # version 2: no data change
    append(table, orders(3, 4))                       # version 3
    ws.coordinator.inject()
    assert segments(ws)[2:] == [("table", f"{2:020d}", 6, 0), ("table", f"{3:020d}", 6, 4)]
    assert ws.store.cut("delta_plan", 3) == {"table": 10}

    # each epoch's plan holds the versions between its cuts: every version once
    plan = run_plan.read(ws.store, ws.job)
    assert [(e.checkpoint_id, [s.name[-1] for s in e.segments], e.records) for e in plan.epochs] == [
        (1, ["0", "1"], 5), (2, [], 0), (3, ["2", "3"], 4)]
    files = delta_source.epoch_files(ws.job.sources[0][1], plan.epochs[2].segments)
    assert [f.first_offset for f in files] == [6]     # the OPTIMIZE's file is not read

    # an overwrite: refused, naming the version and the operation
    write_deltalake(str(table), pa.Table.from_pylist(orders(4, 1), schema=SCHEMA), mode="overwrite")
    message = refused(ws)
    assert message.startswith(f"Delta table {table} version 4 is not an append (WRITE (mode Overwrite): it removes ")
    assert "a Delta source reads appends only" in message
    # and it stays refused: the version is in the table's history for good
    assert refused(ws) == message


def test_a_delete_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    table = tmp_path / "orders"
    job = abs.Job("delta_delete")
    (job.source("orders", abs.delta_source(str(table), {"customer": str, "amount": int}))
        .key_by("customer", str).aggregate("per_user", n=abs.count())
        .sink("out", abs.SqlTable("delta_delete_counts")))
    ws = make_workspace(tmp_path, sqlite_url, job.definition())
    append(table, orders(0, 5))
    ws.coordinator.inject()
    DeltaTable(str(table)).delete("amount = 2")
    assert refused(ws).startswith(f"Delta table {table} version 1 is not an append (DELETE: it removes ")


def test_from_version_skips_the_earlier_versions(tmp_path: Path, sqlite_url: str) -> None:
    table = tmp_path / "orders"
    job = abs.Job("delta_from")
    (job.source("orders", abs.delta_source(str(table), {"customer": str, "amount": int}, from_version=2))
        .key_by("customer", str).aggregate("per_customer", n=abs.count())
        .sink("out", abs.SqlTable("delta_from_counts")))
    ws = make_workspace(tmp_path, sqlite_url, job.definition())
    append(table, orders(0, 3))
    append(table, orders(1, 2))
    ws.coordinator.inject()                           # the table is at version 1: nothing to read yet
    assert segments(ws) == [] and ws.store.cut("delta_from", 1) == {"table": 0}
    append(table, orders(2, 4))
    append(table, orders(3, 1))
    ws.coordinator.inject()
    assert segments(ws) == [("table", f"{2:020d}", 0, 4), ("table", f"{3:020d}", 4, 1)]
    with pytest.raises(ValueError, match="from_version must be a version"):
        abs.delta_source(str(table), {"customer": str}, from_version=-1)


def test_a_replaced_table_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    table = tmp_path / "orders"
    job = abs.Job("delta_replaced")
    (job.source("orders", abs.delta_source(str(table), {"customer": str, "amount": int}))
        .key_by("customer", str).aggregate("per_customer", n=abs.count())
        .sink("out", abs.SqlTable("delta_replaced_counts")))
    ws = make_workspace(tmp_path, sqlite_url, job.definition())
    for batch in range(3):
        append(table, orders(batch, 2))
    ws.coordinator.inject()
    shutil.rmtree(table)                              # another table at the same place, with fewer versions
    append(table, orders(5, 2))
    assert refused(ws).startswith(f"Delta table {table} is at version 0, but version 2 is registered already")
    for batch in range(3):                            # ... or as many, and more
        append(table, orders(6 + batch, 2))
    assert refused(ws).startswith(f"Delta table {table} version 2 (the newest registered) has changed: its "
                                  f"commit adds other files")


def test_a_table_that_is_not_there_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    job = abs.Job("delta_missing")
    (job.source("orders", abs.delta_source(str(tmp_path / "nothing"), {"customer": str}))
        .key_by("customer", str).aggregate("per_user", n=abs.count())
        .sink("out", abs.SqlTable("delta_missing_counts")))
    ws = make_workspace(tmp_path, sqlite_url, job.definition())
    assert refused(ws) == f"Delta source {tmp_path / 'nothing'} is not a Delta table (no _delta_log/ there)"


@pytest.mark.sink_unchecked("nothing runs: inject and its cuts only")
def test_beside_a_file_source(tmp_path: Path, sqlite_url: str) -> None:
    """With several sources the Delta source's partition is ``<source>/table``, beside the file partitions."""
    table = tmp_path / "orders"
    job = abs.Job("delta_two")
    (job.source("orders", abs.delta_source(str(table), {"customer": str, "amount": int}))
        .key_by("customer", str).aggregate("per_customer", n=abs.count())
        .sink("out", abs.SqlTable("delta_two_orders")))
    (job.source("clicks", abs.json_lines({"customer": str}))
        .key_by("customer", str).aggregate("clicks_per_customer", n=abs.count())
        .sink("clicks_out", abs.SqlTable("delta_two_clicks")))
    ws = make_workspace(tmp_path, sqlite_url, job.definition())
    append(table, orders(0, 4))
    (ws.input_dir / "clicks" / "p0").mkdir(parents=True)
    (ws.input_dir / "clicks" / "p0" / "seg-0000.jsonl").write_text('{"customer": "a"}\n{"customer": "b"}\n')
    ws.coordinator.inject()
    append(table, orders(1, 2))
    ws.coordinator.inject()
    assert ws.store.cut("delta_two", 1) == {"clicks/p0": 2, "orders/table": 4}
    assert ws.store.cut("delta_two", 2) == {"clicks/p0": 2, "orders/table": 6}
    assert sorted(segments(ws)) == [("clicks/p0", "seg-0000.jsonl", 0, 2), ("orders/table", f"{0:020d}", 0, 4),
                                    ("orders/table", f"{1:020d}", 4, 2)]


JOB = '''
import absreplay.api as abs

job = abs.Job("delta_orders", parallelism=2)
(
    job.source("orders", abs.delta_source({uri!r}, {{"customer": str, "amount": int}}))
    .key_by("customer", str)
    .aggregate("per_user", n=abs.count(), total=abs.sum("amount"))
    .sink("out", abs.SqlTable("delta_orders_totals"))
)
'''


def delta_workspace(tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch,
                    uri: str | None = None) -> tuple[Workspace, Path]:
    """The job reading ``tmp_path/orders``, which ``uri`` names when given (as the job file declares it)."""
    table, jobs = tmp_path / "orders", tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "delta_orders.py").write_text(JOB.format(uri=uri or str(table)))
    monkeypatch.setenv("ABS_JOBS_DIR", str(jobs))
    return make_workspace(tmp_path, url, get_job("delta_orders"), jobs_dir=str(jobs)), table


def sink(ws: Workspace) -> dict[str, tuple[int, int]]:
    with ws.store.engine.connect() as c:
        return {u: (n, t) for u, n, t in c.execute(text("SELECT customer, n, total FROM delta_orders_totals")).all()}


def expected(rows: list[dict]) -> dict[str, tuple[int, int]]:
    counts, totals = Counter(r["customer"] for r in rows), Counter()
    for r in rows:
        totals[r["customer"]] += r["amount"]
    return {u: (counts[u], totals[u]) for u in counts}


@pytest.mark.spark
@pytest.mark.sink_unchecked("judged here against plain Python")
def test_appends_run_exactly_once(tmp_path: Path, sqlite_url: str, spark, monkeypatch) -> None:
    ws, table = delta_workspace(tmp_path, sqlite_url, monkeypatch)
    landed: list[dict] = []
    for batch in range(3):
        for _ in range(batch + 1):                   # barrier b covers b+1 versions
            rows = orders(batch, 30 + batch)
            if batch == 1:
                rows.append({"customer": "u1", "amount": None, "note": "dead"})
            append(table, rows)
            landed += [r for r in rows if r["amount"] is not None]
        cli_ok(ws, "run", "delta_orders", spark=spark)
        assert sink(ws) == expected(landed)
    assert len(segments(ws)) == 6

    # a version whose file is gone before a run reads it: the run is refused, naming it, before Spark reads
    append(table, orders(9, 3))
    cli_ok(ws, "inject", "delta_orders")
    added = DeltaTable(str(table)).file_uris()
    Path(next(f for f in added if f not in DeltaTable(str(table), version=5).file_uris())).unlink()
    one_line_error(cli(ws, "process", "delta_orders", spark=spark),
                   f"Delta table {table} version 6 of epoch 4: its file ")
    assert ws.store.checkpoint("delta_orders", 4).status == "PENDING"
    assert "verified" in cli_ok(ws, "verify", "delta_orders", spark=spark)

    # a registered version's file vacuumed away: a run that reads it (verify reads every one) is refused
    first = DeltaTable(str(table), version=0).file_uris()[0]
    Path(first).unlink()
    one_line_error(cli(ws, "verify", "delta_orders", spark=spark),
                   f"Delta table {table} version 0 of epoch 1 (read to verify checkpoint 3): its file ")


@pytest.mark.spark
@pytest.mark.sink_unchecked("judged here against plain Python")
def test_a_killed_run_recovers_exactly_once(tmp_path: Path, sqlite_url: str, spark, monkeypatch) -> None:
    ws, table = delta_workspace(tmp_path, sqlite_url, monkeypatch)
    landed: list[dict] = []
    for batch in range(2):
        append(table, orders(batch, 40))
        landed += orders(batch, 40)
        cli_ok(ws, "run", "delta_orders", spark=spark)
    for batch in (2, 3):
        append(table, orders(batch, 50))
        landed += orders(batch, 50)
        cli_ok(ws, "inject", "delta_orders")
    # the run dies after its first ack of checkpoint 3; the next run restores checkpoint 2 and does 3 and 4 again
    proc = start(ws, "process", "delta_orders", faults="snapshot.after_ack@3/1=sleep:600")
    kill_when(proc, "ABS fault point snapshot.after_ack@3/1")
    assert proc.returncode == -signal.SIGKILL
    assert ws.store.checkpoint("delta_orders", 3).status == "PENDING"
    out = cli_ok(ws, "process", "delta_orders", spark=spark)
    assert "restoring from checkpoint 2, 2 pending epoch(s) 3..4" in out
    cli_ok(ws, "finalize", "delta_orders")
    assert sink(ws) == expected(landed)
    assert "verified" in cli_ok(ws, "verify", "delta_orders", spark=spark)


@pytest.mark.spark
@pytest.mark.sink_unchecked("judged here against plain Python")
def test_a_variable_in_the_table_uri(tmp_path: Path, sqlite_url: str, spark, monkeypatch) -> None:
    """``${VAR}`` in a Delta source's uri is read when the table is, as a sink's location: the job file
    imports without it, an inject without it stops in one line naming it, and with it the table is read."""
    monkeypatch.delenv("ORDERS_LAKE", raising=False)
    ws, table = delta_workspace(tmp_path, sqlite_url, monkeypatch, uri="${ORDERS_LAKE}/orders")
    append(table, orders(0, 20))
    one_line_error(cli(ws, "inject", "delta_orders"),
                   "Delta source location '${ORDERS_LAKE}/orders' names ${ORDERS_LAKE}, which is not set")
    assert segments(ws) == []
    monkeypatch.setenv("ORDERS_LAKE", str(tmp_path))
    cli_ok(ws, "run", "delta_orders", spark=spark)
    assert segments(ws) == [("table", f"{0:020d}", 0, 20)]
    assert sink(ws) == expected(orders(0, 20))
