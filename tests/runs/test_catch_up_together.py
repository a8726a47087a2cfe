"""A catch-up runs its pending epochs together (``EpochRunner._together``, ``Dataflow.epochs``): one Spark job
folds them into the local stores in epoch order and writes each epoch's delta. What it leaves is what running
them one at a time leaves: every snapshot's rows and checksum per subtask, every sink, and a plain-Python
computation over the landed records. That holds when a full snapshot falls inside the group, in every
snapshot mode, and after a crash in the middle of a group."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from coordinator.dataflow.discovery import get_job
from coordinator.catalog.db import upgrade
from coordinator.checkpoints.policy import CheckpointPolicy
from coordinator.faults import ProcessCrash
from spark_jobs.run import runner
from spark_jobs.state.stores import apply as store_apply
from tests.helpers import JOBS_DIR, cli, cli_ok, make_workspace

pytestmark = [pytest.mark.spark, pytest.mark.sink_unchecked("judged here, against plain Python and each other"),
              # one worker computes the reference (one_at_a_time) for all of them
              pytest.mark.xdist_group("catch_up_together"), pytest.mark.heavy(seconds=35)]
JOBS = str(JOBS_DIR)
EPOCHS = 8


def land(input_dir: Path, batch: int) -> None:
    for part in (0, 1):
        rows = [{"sensor": f"s{(batch * 5 + i * 3 + part) % 23}", "value": (batch * 17 + i * 7 + part) % 50,
                 "reading": ((batch * 31 + i * 13) % 97) / 8} for i in range(40)]
        path = input_dir / f"p{part}" / f"seg-{batch:04d}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def landed(input_dir: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(input_dir.glob("p*/seg-*")) for line in path.read_text().splitlines()]


def catch_up(tmp_path: Path, spark, monkeypatch, together: int, mode: str = "async", faults: str = "") -> tuple:
    """A catalog of its own; every batch landed and injected, then one process run (after a crash:
    ``recover``) and a finalize."""
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    tmp_path.mkdir(parents=True, exist_ok=True)
    upgrade(url)
    monkeypatch.setattr(runner, "TOGETHER_EPOCHS", together)
    monkeypatch.setenv("READINGS_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    # a full snapshot every 2: some fall inside a group, read from stores already past them
    job = replace(get_job("readings"), policy=CheckpointPolicy(full_snapshot_every=2, retained=EPOCHS + 2))
    ws = make_workspace(tmp_path, url, job, jobs_dir=JOBS)
    for batch in range(EPOCHS):
        land(ws.input_dir, batch)
        ws.coordinator.inject()
    args = ["process", "readings", "--snapshot-mode", mode]
    if faults:
        with pytest.raises(ProcessCrash):
            cli(ws, *args, spark=spark, env={"ABS_FAULTS": faults})
        args[0] = "recover"
    out = cli_ok(ws, *args, spark=spark)
    cli_ok(ws, "finalize", "readings")
    return ws, out


def acks(ws) -> dict:
    return {(a.checkpoint_id, a.operator, a.subtask): (a.state_rows, a.checksum, a.base_checkpoint_id)
            for a in ws.store.all_acks(ws.job.name) if a.operator in ("per_sensor", "per_bucket")}


def sinks(ws, tmp_path: Path) -> tuple:
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    per_sensor = {r["sensor"]: r for r in ws.job.sinks[0].target(url).read().to_pylist()}
    per_bucket = {r["bucket"]: r for r in ws.job.sinks[1].target(url).read().to_pylist()}
    high = sorted((r["sensor"], r["value"]) for r in pq.read_table(tmp_path / "out" / "high").to_pylist())
    return per_sensor, per_bucket, high


@pytest.fixture(scope="session")
def one_at_a_time(tmp_path_factory, spark) -> tuple:
    """The reference: the same catch-up, one epoch at a time (its acks, its sinks). Session-scoped: the
    suite runs its tests heaviest first, so a module's tests are not contiguous and a module-scoped
    fixture would be made again for each."""
    tmp_path = tmp_path_factory.mktemp("alone") / "alone"
    with pytest.MonkeyPatch.context() as monkeypatch:
        ws, out = catch_up(tmp_path, spark, monkeypatch, 1)
    assert "together" not in out
    return acks(ws), sinks(ws, tmp_path)


@pytest.mark.parametrize("route_first_up_to", [store_apply.ROUTE_FIRST_UP_TO, 0], ids=["routed", "merged-first"])
def test_epochs_run_together_leave_what_one_at_a_time_leaves(tmp_path, spark, monkeypatch, one_at_a_time,
                                                             route_first_up_to) -> None:
    """Either plan of the stores' aggregation (``stores.apply._per_key``: records routed to their store, then
    merged per key; or, for many records, merged per key, then routed) against the reference's epochs (routed)."""
    monkeypatch.setattr(store_apply, "ROUTE_FIRST_UP_TO", route_first_up_to)
    together, out = catch_up(tmp_path, spark, monkeypatch, 16)
    # a group stops where a snapshot would read a store older than the undo it keeps
    assert "epochs 1..6 together" in out and "epochs 7..8 together" in out, out
    assert acks(together) == one_at_a_time[0]
    fulls = {c for (c, _, _), (_, _, base) in acks(together).items() if base is None}
    assert fulls == {1, 3, 5, 7}
    assert sinks(together, tmp_path) == one_at_a_time[1]

    records = landed(together.input_dir)
    per_sensor, per_bucket, high = sinks(together, tmp_path)
    by_sensor = defaultdict(list)
    for r in records:
        by_sensor[r["sensor"]].append(r)
    assert {s: (row["n"], row["total"], row["lo"], row["hi"]) for s, row in per_sensor.items()} == {
        s: (len(rs), sum(r["value"] for r in rs), min(r["value"] for r in rs), max(r["reading"] for r in rs))
        for s, rs in by_sensor.items()}
    assert all(row["avg"] == pytest.approx(sum(r["reading"] for r in by_sensor[s]) / row["n"])
               for s, row in per_sensor.items())
    assert {b: row["n"] for b, row in per_bucket.items()} == {
        b: sum(1 for r in records if r["value"] % 3 == b) for b in range(3)}
    assert high == sorted((r["sensor"], r["value"]) for r in records if r["value"] > 40)


def test_no_snapshots_run_epochs_together(tmp_path, spark, monkeypatch, one_at_a_time) -> None:
    """`--snapshot-mode none` upserts each epoch's changes into the sinks: all of them, from one group."""
    together, out = catch_up(tmp_path, spark, monkeypatch, 16, "none")
    assert "epochs 1..8 together" in out, out
    assert sinks(together, tmp_path) == one_at_a_time[1]


def test_a_crash_inside_a_group_recovers_exactly(tmp_path, spark, monkeypatch, one_at_a_time) -> None:
    """Killed once epoch 3 of a group of 6 was computed: the stores are at 6 already, past what `recover`
    restores, so their tasks reload them from the snapshot files; the sinks end as if nothing happened."""
    crashed, out = catch_up(tmp_path, spark, monkeypatch, 16, faults="epoch.compute@3=crash")
    assert "reloads" in out, out
    assert sinks(crashed, tmp_path) == one_at_a_time[1]
    assert "verified" in cli_ok(crashed, "verify", "readings", spark=spark)
