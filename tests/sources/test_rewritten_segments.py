"""A segment rewritten in place after its barrier, keeping its size and mtime, is refused by whatever would read it
(process, verify, rewind, recover: exit 2, one line naming the job, source, segment and epoch, nothing changed),
by its content tag; put back, it is read as the cut promised. Segments registered before content tags
(revision 0010) are checked by size and mtime as before."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash
from sqlalchemy import select

from coordinator.catalog.models import SourceSegment
from coordinator.checkpoints import recovery
from coordinator.errors import SourceError
from tests.helpers import cli, cli_ok, make_workspace, one_line_error, registered_untagged, rewrite_unseen


def tags(ws) -> dict[str, str | None]:
    with ws.store.sessions() as s:
        return {f"{p}/{n}": tag for p, n, tag in s.execute(
            select(SourceSegment.partition, SourceSegment.name, SourceSegment.content_tag))}


def put_back(seg: Path, original: bytes) -> None:
    """The registered bytes again, under the same mtime."""
    st = seg.stat()
    seg.write_bytes(original)
    os.utime(seg, ns=(st.st_atime_ns, st.st_mtime_ns))


def statuses(ws) -> list[tuple[int, str]]:
    return [(c.checkpoint_id, c.status) for c in ws.store.checkpoints(ws.job.name)]


def test_inject_records_each_segments_content_tag_with_the_barrier(tmp_path, sqlite_url) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    ws.land(0)
    ws.coordinator.inject()
    files = sorted(ws.input_dir.glob("p*/seg-*"))
    assert tags(ws) == {f"{f.parent.name}/{f.name}": f"xxh64:{xxhash.xxh64(f.read_bytes()).hexdigest()}"
                        for f in files}


def test_a_parquet_segment_gets_the_content_tag_of_its_bytes(tmp_path) -> None:
    from coordinator.sources.record_formats import ParquetFiles
    from coordinator.sources.source import scan_segment

    path = tmp_path / "seg-1.parquet"
    pq.write_table(pa.table({"user": [1, 2, None]}), path)
    seg = scan_segment("p0", path, ParquetFiles((("user", "long"),)))
    assert seg.records == 3 and seg.content_tag == f"xxh64:{xxhash.xxh64(path.read_bytes()).hexdigest()}"


def test_the_run_check_sees_a_rewrite_that_keeps_size_and_mtime_unless_the_segment_has_no_tag(
        tmp_path, sqlite_url) -> None:
    from spark_jobs.run.runner import EpochRunner

    ws = make_workspace(tmp_path, sqlite_url)
    ws.land(0)
    ws.coordinator.inject()
    seg = ws.input_dir / "p1" / "seg-000000.txt"
    runner = EpochRunner(None, ws.store, ws.job, ws.settings.data_dir, ws.settings.state_uri)  # type: ignore[arg-type]
    runner.check_segments(runner.read_plan().epochs)
    rewrite_unseen(seg, "w1 ", "zz ")
    ws.coordinator.inject()  # a barrier's one stat per segment does not see it; the run that reads it does
    with pytest.raises(SourceError) as info:
        runner.check_segments(runner.read_plan().epochs)
    tag = f"xxh64:{xxhash.xxh64(seg.read_bytes()).hexdigest()}"
    assert str(info.value).startswith(
        f"job 'wordcount', source 'source': segment {seg} of epoch 1 changed after inject: the same size "
        f"({seg.stat().st_size:,} bytes) and mtime but other content (its content tag is {tag}, "
        f"{tags(ws)['p1/seg-000000.txt']} registered)")
    registered_untagged(ws)  # as registered before revision 0010: size and mtime alone, as before
    runner.check_segments(runner.read_plan().epochs)


def test_process_refuses_a_segment_rewritten_after_inject_and_runs_exact_once_it_is_put_back(
        tmp_path, pg_url, spark) -> None:
    ws = make_workspace(tmp_path, pg_url)
    ws.land(0)
    cli_ok(ws, "inject", "wordcount")
    seg = ws.input_dir / "p1" / "seg-000000.txt"
    original = seg.read_bytes()
    rewrite_unseen(seg, "w1 ", "zz ")
    r = cli(ws, "process", "wordcount", spark=spark)
    one_line_error(r, f"job 'wordcount', source 'source': segment {seg} of epoch 1 changed after inject: the same "
                      f"size ({len(original):,} bytes) and mtime but other content")
    assert ws.store.acks(ws.job.name, 1) == [] and statuses(ws) == [(1, "PENDING")]
    put_back(seg, original)
    cli_ok(ws, "process", "wordcount", spark=spark)
    cli_ok(ws, "finalize", "wordcount")
    assert statuses(ws) == [(1, "COMPLETED")]
    assert ws.committed() == ws.expected_at(1)


def test_verify_rewind_and_recover_refuse_a_segment_rewritten_after_its_epoch_was_committed(
        tmp_path, sqlite_url, spark) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    for batch in range(3):
        ws.cycle(spark, batch)
    before, committed = statuses(ws), ws.committed()
    assert committed == ws.expected_at(3)
    seg = ws.input_dir / "p0" / "seg-000001.txt"  # epoch 2's
    original = seg.read_bytes()
    rewrite_unseen(seg, "w1 ", "zz ")
    same = f"changed after inject: the same size ({len(original):,} bytes) and mtime but other content"
    one_line_error(cli(ws, "verify", "wordcount", spark=spark),
                   f"job 'wordcount', source 'source': segment {seg} of epoch 2 (read to verify checkpoint 3) {same}")
    for args in (("rewind", "wordcount", "--to", "1"), ("recover", "wordcount", "--checkpoint", "1")):
        one_line_error(cli(ws, *args, spark=spark), f"job 'wordcount', source 'source': segment {seg} of epoch 2 {same}")
    # refused before anything changed: the checkpoints and the sink as they were, each refusal recorded
    assert statuses(ws) == before and ws.committed() == committed
    assert [(h["kind"], h["result"]) for h in recovery.history(ws.store, ws.job.name)] == [
        ("rewind", "REFUSED"), ("recover", "REFUSED")]
    # a rewind that replays only epoch 3 does not read the segment
    cli_ok(ws, "rewind", "wordcount", "--to", "2", spark=spark)
    put_back(seg, original)
    assert "checkpoint 4 verified" in cli_ok(ws, "verify", "wordcount", spark=spark)
    cli_ok(ws, "rewind", "wordcount", "--to", "1", spark=spark)
    assert ws.committed() == ws.expected_latest() == committed
