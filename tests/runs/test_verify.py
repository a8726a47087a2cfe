"""`verify`: recompute a checkpoint from the sources alone and compare with the stored snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.checkpoints.lifecycle import FailureReason
from coordinator.errors import CheckpointNotFoundError, SourceError
from tests.helpers import cli, make_workspace, registered_untagged, rewrite_unseen


@pytest.mark.sink_unchecked("a source segment is rewritten behind the catalog's back on purpose")
def test_verify_equal_then_differences_when_a_source_changed(tmp_path, pg_url, spark) -> None:
    from spark_jobs.verify import verify

    ws = make_workspace(tmp_path, pg_url)
    for b in range(3):
        ws.cycle(spark, b)
    for checkpoint in (2, 3):
        report = verify(spark, ws.store, ws.job, ws.settings, checkpoint)
        assert report.equal, report
        assert report.stored_rows == report.recomputed_rows == len(ws.expected_at(checkpoint))
    # a segment before the cut, registered before content tags, is rewritten behind the catalog's back
    # (segments must be immutable; a tagged one is refused: tests/sources/test_rewritten_segments.py)
    seg = sorted((ws.input_dir / "p0").iterdir())[0]
    registered_untagged(ws)
    rewrite_unseen(seg, "w1 ", "zz ")
    report = verify(spark, ws.store, ws.job, ws.settings, None)
    assert not report.equal and report.subtasks_differing
    assert any("word='zz'" in line for line in report.differences), report.differences

    ws.land(5)
    ws.coordinator.inject()
    ws.store.fail(ws.job.name, 4, FailureReason.TASK_DECLINED, "test")
    with pytest.raises(CheckpointNotFoundError, match="is FAILED"):
        verify(spark, ws.store, ws.job, ws.settings, 4)
    # a change the catalog sees is named instead: it is the source that differs, not the state
    seg.write_text(seg.read_text() + "late words\n")
    with pytest.raises(SourceError, match=f"segment {seg} of epoch 1 \\(read to verify checkpoint 3\\) changed after "
                                          f"inject"):
        verify(spark, ws.store, ws.job, ws.settings, None)


@pytest.mark.sink_unchecked("a source segment is rewritten behind the catalog's back on purpose")
def test_verify_from_the_command_line(tmp_path, sqlite_url, spark) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    ws.land(0)
    ws.coordinator.inject()
    ws.run_epochs(spark)
    ws.coordinator.finalize()
    r = cli(ws, "verify", "wordcount", spark=spark)
    assert r.code == 0, r.out + r.err
    assert "checkpoint 1 verified" in r.out
    r = cli(ws, "verify", "wordcount", "--checkpoint", "42", spark=spark)
    assert r.code == 2 and "checkpoint 42 of job 'wordcount' does not exist" in r.err
    # the seeded source, registered before content tags, rewritten unseen: the command says DIFFERS and exits 1
    seg = sorted((ws.input_dir / "p0").iterdir())[0]
    registered_untagged(ws)
    rewrite_unseen(seg, "w1 ", "zz ")
    r = cli(ws, "verify", "wordcount", spark=spark)
    assert r.code == 1 and "checkpoint 1 DIFFERS from a recomputation" in r.out and "word='zz'" in r.out, r.out
    # deleted: named, exit 2 (verify reads every segment from the start of the sources)
    seg.unlink()
    r = cli(ws, "verify", "wordcount", spark=spark)
    assert r.code == 2 and f"segment {seg} of epoch 1 (read to verify checkpoint 1) was registered at inject" in r.err, r.err


def test_verify_that_cannot_check_says_so_with_its_own_exit_code(tmp_path, sqlite_url, spark) -> None:
    """A missing state file is not "differs" (1): verify could not check, exit 3, one line naming the file."""
    ws = make_workspace(tmp_path, sqlite_url)
    ws.cycle(spark, 0)
    ack = next(a for a in ws.store.acks(ws.job.name, 1) if a.operator == "count" and a.state_uri)
    for f in Path(ack.state_uri.removeprefix("file://")).iterdir():
        f.unlink()
    r = cli(ws, "verify", "wordcount", spark=spark)
    lines = r.err.strip().splitlines()
    assert r.code == 3, r.out + r.err
    assert len(lines) == 1 and ack.state_uri in lines[0] and "checkpoint 1" in lines[0], r.err
