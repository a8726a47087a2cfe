"""A registered segment that changes under us is reported by name, never dropped or counted twice:
appended, truncated, rewritten (the same size too), renamed, deleted while still needed, a name reused.
Source retention: segments entirely before the oldest completed checkpoint's cut may be deleted."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from coordinator.catalog.models import SourceSegment
from coordinator.errors import SourceError
from tests.helpers import Workspace, cli, make_workspace, one_line_error


@pytest.fixture
def ws(tmp_path: Path, sqlite_url: str) -> Workspace:
    return make_workspace(tmp_path, sqlite_url)


def land(ws: Workspace, name: str, text: str, partition: str = "p0") -> Path:
    path = ws.input_dir / partition / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def later_mtime(path: Path) -> int:
    """Move the file's mtime a second on (a rewrite within one mtime tick must not hide in a test)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    return st.st_mtime_ns + 10**9


def refused(ws: Workspace) -> str:
    """inject stops with a SourceError and writes nothing (no barrier, no segment); its one-line message."""
    before = [c.checkpoint_id for c in ws.store.checkpoints(ws.job.name)]
    with pytest.raises(SourceError) as info:
        ws.coordinator.inject()
    assert [c.checkpoint_id for c in ws.store.checkpoints(ws.job.name)] == before
    assert "\n" not in str(info.value)
    return str(info.value)


def registered(ws: Workspace) -> list[tuple[str, str, int]]:
    with ws.store.sessions() as s:
        return [tuple(r) for r in s.execute(select(SourceSegment.partition, SourceSegment.name,
                                                   SourceSegment.first_offset).order_by(SourceSegment.name))]


def _append(p: Path) -> None:
    p.write_bytes(p.read_bytes() + b"late words\n")


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:4])


def _rewrite_same_size(p: Path) -> None:
    p.write_bytes(p.read_bytes().replace(b"one", b"ONE"))
    later_mtime(p)


def _replace(p: Path) -> None:
    p.write_bytes(b"another text altogether\n" * 3)


CHANGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "appended": (_append, "(appended)"),
    "truncated": (_truncate, "(truncated or replaced)"),
    "rewritten with the same size": (_rewrite_same_size, "the same size (21 bytes) but other content"),
    "replaced": (_replace, "with other content"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_segment_stops_the_next_barrier_with_its_name(ws, change) -> None:
    seg = land(ws, "seg-1.txt", "one two\nthree\nfour 5\n")
    ws.coordinator.inject()
    mutate, detail = CHANGES[change]
    mutate(seg)
    land(ws, "seg-2.txt", "new data\n")  # not registered either: the barrier is refused as a whole
    message = refused(ws)
    assert message.startswith(f"segment {seg} changed after inject: ") and detail in message
    assert registered(ws) == [("p0", "seg-1.txt", 0)]


def test_a_touched_segment_with_the_same_content_is_fine_and_not_hashed_again(ws) -> None:
    seg = land(ws, "seg-1.txt", "one two\n")
    ws.coordinator.inject()
    mtime = later_mtime(seg)
    assert ws.coordinator.inject().checkpoint_id == 2
    with ws.store.sessions() as s:
        assert s.scalars(select(SourceSegment.mtime_ns)).one() == mtime


def test_a_same_size_rewrite_stops_a_run_before_spark_reads_anything(ws) -> None:
    """The run's own check (inject may not run in between): a touched segment passes, a rewritten one not."""
    from spark_jobs.run.runner import EpochRunner

    seg = land(ws, "seg-1.txt", "one two\n")
    ws.coordinator.inject()
    runner = EpochRunner(None, ws.store, ws.job, ws.settings.data_dir, ws.settings.state_uri)  # type: ignore[arg-type]
    later_mtime(seg)
    runner.check_segments(runner.read_plan().epochs)
    seg.write_bytes(b"one TWO\n")
    later_mtime(seg)
    with pytest.raises(SourceError, match=f"segment {seg} of epoch 1 changed after inject: the same size"):
        runner.check_segments(runner.read_plan().epochs)


@pytest.mark.parametrize("completed", [False, True], ids=["needed", "old"])
def test_a_renamed_segment_is_named_with_its_new_name_and_not_counted_twice(ws, completed) -> None:
    """Even a segment old enough to be deleted: under a new name its records would get new offsets."""
    seg = land(ws, "seg-1.txt", "one two\nthree\n")
    ws.coordinator.inject()
    if completed:
        ws.complete(1)
    seg.rename(seg.with_name("seg-7.txt"))
    message = refused(ws)
    assert message.startswith(f"segment {seg} was renamed to {seg.with_name('seg-7.txt')} after inject")


def test_a_deleted_segment_is_an_error_while_no_checkpoint_has_completed(ws) -> None:
    seg = land(ws, "seg-1.txt", "one two\nthree\n")
    ws.coordinator.inject()
    seg.unlink()
    message = refused(ws)
    assert message.startswith(f"segment {seg} (offsets 0 to 1 of partition p0) was registered at inject and is gone")
    assert "no checkpoint has completed yet" in message


def test_source_retention_allows_deleting_only_segments_before_the_oldest_completed_cut(ws) -> None:
    first = land(ws, "seg-1.txt", "a\nb\n")
    ws.coordinator.inject()
    ws.complete(1)
    second = land(ws, "seg-2.txt", "c\n")
    ws.coordinator.inject()
    ws.complete(2)  # both retained: a recovery or rewind may still replay from checkpoint 1
    first.unlink()
    land(ws, "seg-3.txt", "d\ne\n")
    outcome = ws.coordinator.inject()
    assert outcome.cut == {"p0": 5} and outcome.new_records == 2
    assert registered(ws) == [("p0", "seg-1.txt", 0), ("p0", "seg-2.txt", 2), ("p0", "seg-3.txt", 3)]
    second.unlink()
    message = refused(ws)
    assert message.startswith(f"segment {second} (offsets 2 to 2 of partition p0) was registered at inject and is "
                              f"gone, but it is still needed: it is not entirely before the cut of checkpoint 1")


def test_a_reused_name_of_a_deleted_segment_is_not_ignored(ws) -> None:
    first = land(ws, "seg-1.txt", "a\nb\n")
    ws.coordinator.inject()
    ws.complete(1)
    first.unlink()  # allowed: before checkpoint 1's cut
    ws.coordinator.inject()
    land(ws, "seg-1.txt", "new records\nunder an old name\n")
    message = refused(ws)
    assert message.startswith(f"segment {first} changed after inject: 4 bytes registered, 30 now")
    assert "a name is not reused" in message


def test_inject_through_the_command_line_exits_2_naming_the_segment(ws) -> None:
    seg = land(ws, "seg-1.txt", "one two\n")
    ws.coordinator.inject()
    _append(seg)
    one_line_error(cli(ws, "inject", "wordcount"), f"error: segment {seg} changed after inject: 8 bytes registered")


def test_a_segment_deleted_while_a_run_reads_it_is_named_not_a_spark_traceback(ws, spark, monkeypatch) -> None:
    """Gone after the run checked it, before Spark read it: the epoch's failure names the segment."""
    from spark_jobs.run import runner

    seg = land(ws, "seg-1.txt", "one two\n")
    ws.coordinator.inject()
    read_lines = runner.read_lines

    def delete_then_read(*args, **kwargs):
        seg.unlink()
        return read_lines(*args, **kwargs)

    monkeypatch.setattr(runner, "read_lines", delete_then_read)
    with pytest.raises(SourceError, match=f"segment {seg} of epoch 1 was registered at inject .* and is gone"):
        ws.run_epochs(spark)
    assert ws.store.acks(ws.job.name, 1) == []
