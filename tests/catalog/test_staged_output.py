"""A commit checks what it commits (issue 10, item 2): staged files are durable before their ack,
described by a manifest the catalog fingerprints, and verified before a row is written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import text

from coordinator.checkpoints import manifests
from tests.helpers import cli, lost_and_duplicated, make_workspace, stage_counts


def marks(ws) -> list[tuple]:
    with ws.store.engine.connect() as c:
        return c.execute(text('SELECT partition, "offset" FROM sink_watermarks ORDER BY 1')).all()


def txn_status(ws) -> dict[int, str]:
    with ws.store.engine.connect() as c:
        return dict(c.execute(text("SELECT checkpoint_id, status FROM sink_transactions")).all())


def damage_missing(f: Path) -> None:
    f.unlink()


def damage_empty(f: Path) -> None:
    f.write_bytes(b"")


def damage_same_size(f: Path) -> None:
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))


def damage_extra(f: Path) -> None:
    (f.parent / "part-9.parquet").write_bytes(f.read_bytes())


def damage_manifest(f: Path) -> None:
    manifest = f.parent.parent / manifests.MANIFEST
    manifest.write_text(manifest.read_text().replace('"rows": 2', '"rows": 3'))


DAMAGE = {
    "missing": (damage_missing, "is missing"),
    "zero-length": (damage_empty, "has 0 bytes"),
    "same-size-other-content": (damage_same_size, "other content"),
    "extra-file": (damage_extra, "part-9.parquet was not part of it"),
    "manifest-edited": (damage_manifest, "was changed after the ack"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_staged_file_commits_nothing_and_says_which(damage, tmp_path, catalog_url) -> None:
    ws = make_workspace(tmp_path, catalog_url)
    for cut in (10, 20):
        ws.store.trigger(ws.job.name, lambda s, cid, end=cut: ({"p0": end}, 0, 0))
    stage_counts(ws, 1, {"a": 1}, None)
    ws.complete(1)
    ws.coordinator.finalize()
    victim = stage_counts(ws, 2, {"a": 2, "b": 1}, 1)
    ws.complete(2)
    breaks, says = DAMAGE[damage]
    breaks(victim)
    r = cli(ws, "finalize", "wordcount")
    assert r.code == 1, r.out + r.err
    line = r.err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "staged output of checkpoint 2 of job 'wordcount' does not match its ack" in line and says in line
    assert "nothing of it was committed" in line and "absreplay recover wordcount --checkpoint 1" in line
    # the sink, the marks and the transaction are as before the attempt
    assert ws.committed() == {"a": 1}
    assert marks(ws) == [("p0", 10)]
    assert txn_status(ws) == {1: "COMMITTED", 2: "STAGED"}


def test_an_undamaged_output_commits_and_is_described_in_the_catalog(tmp_path, catalog_url) -> None:
    ws = make_workspace(tmp_path, catalog_url)
    ws.store.trigger(ws.job.name, lambda s, cid: ({"p0": 10}, 0, 0))
    f = stage_counts(ws, 1, {"a": 1, "b": 2}, None)
    ws.complete(1)
    with ws.store.engine.connect() as c:
        files, size, checksum = c.execute(text("SELECT files, bytes, checksum FROM sink_transactions")).one()
    assert (files, size, len(checksum)) == (1, f.stat().st_size, 64)
    ws.coordinator.finalize()
    assert ws.committed() == {"a": 1, "b": 2} and txn_status(ws) == {1: "COMMITTED"}


def test_seal_fsyncs_every_file_and_directory_before_the_ack(tmp_path, monkeypatch) -> None:
    job_root = tmp_path / "state" / "job"
    op = job_root / "chk-1" / "count"
    (op / "subtask=0").mkdir(parents=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1]}), op / "subtask=0" / "part-0.parquet")
    synced: list[str] = []
    real = os.fsync

    def record(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    (op / "subtask=1").mkdir()
    (op / "subtask=1" / ".part-1.parquet.crc").write_bytes(b"not data")
    pq.write_table(pa.table({"x": [2, 3]}), op / "subtask=1" / "part-1.parquet")
    manifest = manifests.seal(str(op), str(job_root))
    # what an ack records as a subtask's bytes: its data files' (not Spark's checksum files)
    assert [manifest.bytes_under(f"subtask={i}") for i in (0, 1)] == [
        (op / f"subtask={i}" / f"part-{i}.parquet").stat().st_size for i in (0, 1)]
    assert {str(op / "subtask=0" / "part-0.parquet"), str(op / manifests.MANIFEST), str(op / "subtask=0"), str(op),
            str(op.parent), str(job_root)} <= set(synced)


@pytest.mark.heavy(seconds=25)
def test_fallback_past_a_checkpoint_whose_files_were_lost_replays_its_epoch(tmp_path, pg_url, spark) -> None:
    """Checkpoint 3 completed, its state files (which are also its staged output) lost before the
    commit. finalize refuses it by name; `recover --fallback` restores 2, aborts 3's output instead
    of committing it, and the replay of 3 brings its epoch to the sink: nothing lost."""
    ws = make_workspace(tmp_path, pg_url)
    for b in range(2):
        ws.cycle(spark, b)
    ws.land(2)
    ws.coordinator.inject()
    ws.run_epochs(spark)  # checkpoint 3: COMPLETED, its output STAGED
    ack = next(a for a in ws.store.acks(ws.job.name, 3) if a.operator == ws.job.state_operator and a.state_uri)
    for f in Path(ack.state_uri.removeprefix("file:")).glob("*.parquet"):
        f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])  # truncated
    r = cli(ws, "finalize", "wordcount")
    assert r.code == 1 and "checkpoint 3" in r.err and "--checkpoint 2" in r.err, r.err
    r = cli(ws, "recover", "wordcount", "--fallback", spark=spark)
    assert r.code == 0, r.out + r.err
    status = txn_status(ws)
    assert status[3] == "ABORTED"
    assert lost_and_duplicated(ws.expected_latest(), ws.committed()) == (0, 0)
    assert ws.committed() == ws.expected_at(3)
