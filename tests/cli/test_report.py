"""``absreplay report``: one self-contained HTML file with the view's charts and the job's whole history."""

from __future__ import annotations

import re
from pathlib import Path

from absreplay.airflow import orchestration
from coordinator.checkpoints.lifecycle import FailureReason
from coordinator.checkpoints.state_handle import StateHandle
from tests.helpers import cli, cli_ok, make_workspace

JOB = "wordcount"


def test_report_writes_one_self_contained_file_with_every_chart(tmp_path: Path, sqlite_url: str) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    for n in range(1, 5):
        ws.land(n, lines=10)
        orchestration.inject_barrier(ws.settings, JOB)
    for n in (1, 2, 4):
        ws.store.ack_many(JOB, n, [StateHandle(t.operator, t.subtask, state_bytes=1000 * n, async_ms=7 * n)
                                   for t in ws.job.execution_graph.tasks])
    ws.store.fail(JOB, 3, FailureReason.TIMEOUT, "no ack within 600000 ms")

    out = cli_ok(ws, "report", JOB, "--out", str(tmp_path / "out"))
    (path,) = (tmp_path / "out").iterdir()
    assert str(path) in out and "4 checkpoint(s)" in out
    html = path.read_text()
    for key in ("durations", "state", "records", "back_edge", "status"):
        assert f'data-chart="{key}"' in html
    assert html.count('class="bar" data-checkpoint=') == 5 * 4
    assert "TIMEOUT" in html and "no ack within 600000 ms" in html
    rows = re.findall(r'<tr><td class="num">(\d+)</td><td class="status-(\w+)"', html.split('id="checkpoints"')[1])
    assert rows == [("4", "COMPLETED"), ("3", "FAILED"), ("2", "COMPLETED"), ("1", "COMPLETED")]
    # nothing to fetch: no script, stylesheet or image from elsewhere
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html)


def test_report_counts_the_checkpoints_retention_keeps(tmp_path: Path, sqlite_url: str) -> None:
    """Six completed checkpoints, retention applied (the policy keeps 3): 3 retained, 3 SUBSUMED, all six
    in the history."""
    ws = make_workspace(tmp_path, sqlite_url)
    for n in range(1, 7):
        ws.land(n, lines=5)
        orchestration.inject_barrier(ws.settings, JOB)
        ws.store.ack_many(JOB, n, [StateHandle(t.operator, t.subtask, state_bytes=10) for t in ws.job.execution_graph.tasks])
    assert ws.store.policy(JOB).retained == 3
    assert ws.store.subsume_beyond_retention(JOB) == [3, 2, 1]
    out = cli_ok(ws, "report", JOB, "--out", str(tmp_path / "out"))
    assert "report of 6 checkpoint(s), 3 retained, written to" in out
    html = (tmp_path / "out" / f"absreplay-{JOB}-report.html").read_text()
    assert ('<p id="retention">6 checkpoint(s) in the catalog&#39;s history, 3 of them retained (COMPLETED, '
            'restorable: retention keeps the newest 3 completed, and any whose sink output is not committed yet); '
            'the others: 3 SUBSUMED.</p>') in html
    assert "trigger → complete</th>" in html and "bytes written" in html and "Bytes written per checkpoint" in html


def test_report_of_an_unknown_job_is_bad_input(tmp_path: Path, sqlite_url: str) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    r = cli(ws, "report", "nojob", "--out", str(tmp_path / "out"))
    assert r.code == 2 and "nojob" in r.err
    assert not (tmp_path / "out").exists()
