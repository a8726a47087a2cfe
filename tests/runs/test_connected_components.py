"""connected_components end to end on PostgreSQL with real Spark: cycles, SIGKILLs, a corrupt back-edge log.

Commands run in this process on the shared session (tests.helpers.cli), except the one real
SIGKILL of a spark-submit'ed run (state and log written, not acked); the other deaths are
in-process crashes (fault action ``crash``, see tests/catalog/test_fault_points.py).

The reference is a union-find over the edges read from the segment files
(absreplay_examples.union_find), never the job's own code. A long path whose smallest
id sits at its far end keeps labels circulating for many rounds, so back-edge
logs are not empty while edges land; empty barriers afterwards let the loop
drain, after which the committed labels must equal the union-find exactly.
"""

from __future__ import annotations

import json
import random
import re
import signal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

from absreplay_examples.definitions import connected_components
from absreplay_examples.sample_data import land_segment
from absreplay_examples.union_find import labels_at
from coordinator.errors import StateIntegrityError
from tests.helpers import cli_ok, crash, make_workspace, registered_untagged, rewrite_unseen, start

pytestmark = pytest.mark.spark
JOB = "connected_components"


def land_graph(ws, batches: int = 4, path: int = 16, seed: int = 5) -> None:
    """Batch 0: a path path..1 in random order (label 1 needs ``path`` rounds to reach its end);
    later batches: random edges among 100..160, one of them joined to the path. A barrier after each."""
    rng = random.Random(seed)
    chain = [(v, v - 1) for v in range(path, 1, -1)]
    rng.shuffle(chain)
    rest = [(rng.randrange(100, 160), rng.randrange(100, 160)) for _ in range(60)] + [(160, path)]
    rng.shuffle(rest)
    size = -(-len(rest) // max(batches - 1, 1))
    chunks = [chain] + [rest[i * size:(i + 1) * size] for i in range(batches - 1)]
    for b, chunk in enumerate(chunks):
        land_segment(ws.input_dir / "p0", f"seg-{b:06d}.txt", [f"{u} {v}" for u, v in chunk[::2]])
        land_segment(ws.input_dir / "p1", f"seg-{b:06d}.txt", [f"{u}\t{v}" for u, v in chunk[1::2]])
        ws.coordinator.inject()


def committed_labels(ws) -> dict[int, int]:
    with ws.store.engine.connect() as c:
        return dict(c.execute(text("SELECT vertex, component FROM cc_labels")).all())


def back_edge_records(ws, checkpoint_id: int) -> int:
    with ws.store.engine.connect() as c:
        return c.execute(text("SELECT back_edge_records FROM checkpoint_stats WHERE job = :j AND checkpoint_id = :n"),
                         {"j": JOB, "n": checkpoint_id}).scalar_one()


def expected(ws) -> dict[int, int]:
    latest = ws.store.latest_completed(JOB).checkpoint_id
    return labels_at(ws.input_dir, ws.store.cut(JOB, latest))


def test_cycles_converge_to_the_union_find_and_every_checkpoint_has_its_log(tmp_path, pg_url, spark) -> None:
    ws = make_workspace(tmp_path, pg_url, connected_components())
    land_graph(ws, batches=2)
    ws.run_epochs(spark)  # catch-up: two epochs in one run
    ws.coordinator.finalize()
    for _ in range(3):
        ws.coordinator.inject()  # no new edge: the epoch only runs the loop
        assert not ws.run_epochs(spark).failed
        ws.coordinator.finalize()
        latest = ws.store.latest_completed(JOB).checkpoint_id
        truth = expected(ws)
        labels = committed_labels(ws)
        # the sink shows checkpoint n's labels: sound (same component, never above the vertex) ...
        assert set(labels) == set(truth)
        assert all(truth[c] == truth[v] and c <= v for v, c in labels.items())
        # ... and not final while the back-edge log still carries lower labels
        assert (labels == truth) or back_edge_records(ws, latest) > 0
    assert back_edge_records(ws, 1) > 0 and back_edge_records(ws, 2) > 0
    for _ in range(12):
        if not back_edge_records(ws, ws.store.latest_completed(JOB).checkpoint_id):
            break
        ws.coordinator.inject()  # an empty epoch: the loop drains its log
        ws.run_epochs(spark)
        ws.coordinator.finalize()
    else:
        pytest.fail("the loop did not drain in 12 empty epochs")
    assert committed_labels(ws) == expected(ws)
    with ws.store.engine.connect() as c:
        rows = c.execute(text(
            "SELECT c.checkpoint_id, COUNT(b.subtask), t.status, t.rows FROM checkpoints c "
            "JOIN back_edge_logs b ON b.job = c.job AND b.checkpoint_id = c.checkpoint_id "
            "JOIN sink_transactions t ON t.job = c.job AND t.checkpoint_id = c.checkpoint_id "
            "WHERE c.job = :j GROUP BY c.checkpoint_id, t.status, t.rows ORDER BY c.checkpoint_id"), {"j": JOB}).all()
    assert [n for n, *_ in rows] == list(range(1, len(rows) + 1)) and all(k == 2 for _, k, _, _ in rows)
    # an epoch without new edges changed labels, and its output was committed, not taken for a replay
    assert rows[2][2] == "COMMITTED" and rows[2][3] > 0
    for r in ws.store.history(JOB):
        assert r["acked_tasks"] == r["total_tasks"] == 12


def die(ws, spark, fault: str, real: bool = False) -> str:
    """Start `process` with ``fault`` armed; it must die there. ``real``: spark-submit and SIGKILL."""
    if real:
        proc = start(ws, "process", JOB, faults=f"{fault}=kill")
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == -signal.SIGKILL, out
        return out
    crash(ws, spark, fault, "process", JOB)
    return ""


@pytest.mark.parametrize(
    "fault, real",
    [("epoch.compute@3", False), pytest.param("snapshot.before_ack@3", True, marks=pytest.mark.heavy(seconds=60))],
    ids=["mid-epoch", "state-and-log-written-before-ack-sigkill"],
)
def test_killed_then_resume_replays_the_back_edge_log_first(tmp_path, pg_url, spark, fault, real) -> None:
    ws = make_workspace(tmp_path, pg_url, connected_components())
    land_graph(ws)
    out = die(ws, spark, fault, real)
    assert ws.store.checkpoint(JOB, 3).status == "PENDING"
    restored = ws.store.latest_completed(JOB).checkpoint_id
    assert restored in (1, 2), out
    # the checkpoint recovery starts from holds labels still circulating: its log is not empty
    log_records = back_edge_records(ws, restored)
    assert log_records > 0
    for _ in range(6):
        ws.coordinator.inject()
    out = cli_ok(ws, "process", JOB, spark=spark)
    assert f"restoring from checkpoint {restored}," in out
    assert f"feeding back-edge log {restored} ({log_records:,} records) to the loop head first" in out
    cli_ok(ws, "finalize", JOB)
    latest = ws.store.latest_completed(JOB).checkpoint_id
    assert latest == 10 and back_edge_records(ws, latest) == 0
    assert committed_labels(ws) == expected(ws)


@pytest.mark.parametrize("seed", [5])
def test_randomized_kills_then_resume(tmp_path, pg_url, spark, seed) -> None:
    """Two deaths in a row, at a fault point and a pending checkpoint drawn from a seeded RNG; then one
    resume from whatever completed, with the back-edge log of that checkpoint fed first."""
    rng = random.Random(seed)
    ws = make_workspace(tmp_path, pg_url, connected_components())
    land_graph(ws, batches=5, seed=seed % 97)
    for _ in range(6):
        ws.coordinator.inject()
    restored_logs: list = []
    for _ in range(2):
        pending = [c.checkpoint_id for c in ws.store.checkpoints(JOB) if c.status == "PENDING"]
        point, at = rng.choice(["epoch.compute", "snapshot.before_ack"]), rng.choice(pending[:4])
        die(ws, spark, f"{point}@{at}")
        latest = ws.store.latest_completed(JOB)
        restored_logs.append((point, at, latest and (latest.checkpoint_id, back_edge_records(ws, latest.checkpoint_id))))
    out = cli_ok(ws, "process", JOB, spark=spark)
    assert re.search(r"restoring from checkpoint \w+, \d+ pending", out), restored_logs
    cli_ok(ws, "finalize", JOB)
    assert back_edge_records(ws, ws.store.latest_completed(JOB).checkpoint_id) == 0
    assert committed_labels(ws) == expected(ws), restored_logs


def test_a_corrupt_or_missing_back_edge_log_stops_the_restore(tmp_path, pg_url, spark) -> None:
    ws = make_workspace(tmp_path, pg_url, connected_components())
    land_graph(ws, batches=2)
    ws.run_epochs(spark)
    ws.coordinator.finalize()
    latest = ws.store.latest_completed(JOB).checkpoint_id
    from coordinator.checkpoints import back_edge_logs

    part = next(h for h in back_edge_logs.of_checkpoint(ws.store.sessions, JOB, latest) if h.records)
    ws.coordinator.inject()
    files = list(Path(part.uri.removeprefix("file://")).glob("*.parquet"))
    assert files, part.uri
    table = pq.read_table(files[0])
    labels = table.column("label").to_pylist()
    labels[0] -= 1
    pq.write_table(table.set_column(table.schema.get_field_index("label"), "label", pa.array(labels, "int64")),
                   files[0])
    with pytest.raises(StateIntegrityError, match=rf"cannot read back-edge log files .*{part.uri}.* of checkpoint {latest}"):
        ws.run_epochs(spark)
    files[0].with_name(f".{files[0].name}.crc").unlink()
    with pytest.raises(StateIntegrityError, match=rf"back-edge log file {part.uri} of checkpoint {latest} is corrupt"):
        ws.run_epochs(spark)
    for f in files[0].parent.iterdir():
        f.unlink()
    files[0].parent.rmdir()
    with pytest.raises(StateIntegrityError, match=rf"back-edge log file {part.uri} of checkpoint {latest} is missing"):
        ws.run_epochs(spark)
    assert ws.store.checkpoint(JOB, latest + 1).status == "PENDING"  # nothing was processed


def test_verify_recomputes_the_meaning_of_a_checkpoint_with_a_loop(tmp_path, pg_url, spark) -> None:
    from spark_jobs.verify import verify

    ws = make_workspace(tmp_path, pg_url, connected_components())
    land_graph(ws, batches=2, path=10)
    ws.run_epochs(spark)
    ws.coordinator.finalize()
    assert back_edge_records(ws, 2) > 0
    report = verify(spark, ws.store, ws.job, ws.settings, 2)
    assert report.equal, report
    assert report.stored_rows == report.recomputed_rows == len(expected(ws))
    # an edge before the cut rewritten behind the catalog's back (unseen: the same size and mtime, a segment
    # registered before content tags), so the recomputation disagrees; a change the catalog sees is named
    # instead (tests/runs/test_verify.py, tests/sources/test_rewritten_segments.py)
    seg = ws.input_dir / "p0" / "seg-000000.txt"
    registered_untagged(ws)
    rewrite_unseen(seg, "8 7\n", "1 9\n")
    report = verify(spark, ws.store, ws.job, ws.settings, 2)
    assert not report.equal and report.recomputed_rows == report.stored_rows
    assert report.differences[0] == (
        "labels: vertex=1: stored component=1, neighbors=[2]; recomputed component=1, neighbors=[2, 9]"
    ), report.differences


def test_recover_from_an_older_checkpoint_feeds_its_back_edge_log_first(tmp_path, pg_url, spark) -> None:
    ws = make_workspace(tmp_path, pg_url, connected_components())
    land_graph(ws, batches=3)
    ws.run_epochs(spark)
    ws.coordinator.finalize()
    log_records = back_edge_records(ws, 2)
    assert log_records > 0
    out = cli_ok(ws, "recover", JOB, "--checkpoint", "2", spark=spark)
    assert f"feeding back-edge log 2 ({log_records:,} records) to the loop head first" in out
    for _ in range(6):
        ws.coordinator.inject()
    cli_ok(ws, "process", JOB, spark=spark)
    cli_ok(ws, "finalize", JOB)
    assert back_edge_records(ws, ws.store.latest_completed(JOB).checkpoint_id) == 0
    assert committed_labels(ws) == expected(ws)


def test_the_command_line_runs_checkpoints_and_verifies_connected_components(tmp_path, sqlite_url, spark) -> None:
    ws = make_workspace(tmp_path, sqlite_url, connected_components())
    land_graph(ws, batches=1, path=6)
    out = cli_ok(ws, "run", JOB, "--cycles", "2", spark=spark)
    assert "cycle 2/2" in out and "committed 1,2;" in out and "committed 3;" in out
    out = cli_ok(ws, "checkpoints", JOB, "--json")
    assert [row["status"] for row in json.loads(out)] == ["COMPLETED"] * 3
    out = cli_ok(ws, "verify", JOB, spark=spark)
    assert "checkpoint 3 verified" in out
    assert committed_labels(ws) == expected(ws)
