"""The view's numbers and links, in process, on SQLite and PostgreSQL catalogs (issue 61, items 4 and 6).

The history's pager and status filter carry no empty parameter, and an empty status means all; a
FAILED checkpoint's records are shown on the checkpoint whose commit carried them; the confirmation
lists what ``reset_after`` then does (later PENDING checkpoints, already SUPERSEDED ones); bytes,
durations and times read the same in the charts and the tables (binary units, human durations, UTC);
the snapshot phases are the checkpoint's, shown once; a page asked for while signed out goes to
Airflow's login page and back. tests/airflow/test_airflow_view_browser.py shows the same in a browser.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import parse_qs, urlsplit

import pytest

from absreplay.commands.airflow_demo import isolate_airflow_home

isolate_airflow_home()  # before airflow is imported: its configuration is read once

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager  # noqa: E402
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser  # noqa: E402
from airflow.api_fastapi.core_api.security import get_user  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import update  # noqa: E402

from absreplay.airflow import orchestration  # noqa: E402
from absreplay.airflow_plugin import recovery_runs  # noqa: E402
from absreplay.airflow_plugin.access import auth_manager  # noqa: E402
from absreplay.airflow_plugin.app import PAGE_SIZE, app, listing_query  # noqa: E402
from absreplay.airflow_plugin.catalog import catalog_engine  # noqa: E402
from absreplay.commands.views import format_bytes, format_duration, format_time  # noqa: E402
from coordinator.catalog import epochs  # noqa: E402
from coordinator.catalog.models import Checkpoint, SinkTransaction  # noqa: E402
from coordinator.checkpoints import recovery, run_plan  # noqa: E402
from coordinator.checkpoints.lifecycle import CheckpointStatus, FailureReason, SinkTxnStatus  # noqa: E402
from coordinator.checkpoints.state_handle import StateHandle  # noqa: E402
from tests.helpers import Workspace, make_workspace  # noqa: E402

JOB = "wordcount"
#: long before and long after any recovery these tests run: which commits a rewind already reverted
EARLIER = datetime(2026, 1, 1, tzinfo=UTC)
LATER = datetime(2099, 1, 1, tzinfo=UTC)


def test_one_formatter_for_bytes_durations_and_times() -> None:
    assert [format_bytes(n) for n in (None, 0, 1023, 1024, 2400, 5 * 2**20, 3 * 2**30, 2**42)] == [
        "0 B", "0 B", "1023 B", "1.0 KiB", "2.3 KiB", "5.0 MiB", "3.0 GiB", "4096.0 GiB"]
    assert [format_duration(ms) for ms in (None, 0, 0.5, 850, 1000, 1234, 59_949, 184_000, 3_599_400, 7_500_000)] == [
        "", "0 ms", "0.5 ms", "850 ms", "1.0 s", "1.2 s", "59.9 s", "3 min 4 s", "59 min 59 s", "2 h 5 min"]
    at = datetime(2026, 3, 4, 23, 30, 5, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(at) == "2026-03-04 21:30:05 UTC"
    assert format_time(datetime(2026, 3, 4, 21, 30, 5)) == "2026-03-04 21:30:05 UTC"  # the catalog's naive UTC
    assert format_time(None) == ""


def test_a_failed_checkpoints_records_go_with_the_next_commit() -> None:
    cuts = {1: {"p0": 5}, 2: {"p0": 9}, 3: {"p0": 12}, 4: {"p0": 20}, 5: {"p0": 12}, 6: {"p0": 20}, 7: {"p0": 30}}
    # 2 FAILED: 3 carries its epoch. A recovery to 1 replayed 3 and 4 as 5 and 6 (2 stays FAILED); replay 5
    # FAILED too: 6, the next checkpoint the next run completes, carries its epoch; 7 is new
    replays = {5: 3, 6: 4}
    assert epochs.epoch_records(cuts, replays) == {1: 5, 2: 4, 3: 3, 4: 8, 5: 3, 6: 8, 7: 10}
    assert epochs.epoch_records(cuts, replays, failed={2, 5}) == {1: 5, 2: 0, 3: 7, 4: 8, 5: 0, 6: 15, 7: 10}
    assert epochs.original_checkpoint({6: 3, 9: 6}, 9) == 3 and epochs.original_checkpoint({}, 4) == 4


@pytest.fixture
def ws(tmp_path, catalog_url: str) -> Workspace:
    return make_workspace(tmp_path, catalog_url)


@pytest.fixture
def as_role(ws: Workspace) -> Iterator:
    """``as_role(role)``: a client signed in with that role; ``as_role(None)``: one signed out."""
    app.dependency_overrides[auth_manager] = SimpleAuthManager
    app.dependency_overrides[catalog_engine] = lambda: ws.store.engine

    def client(role: str | None) -> TestClient:
        if role is None:
            app.dependency_overrides.pop(get_user, None)  # Airflow's own: no cookie, no token, a 401
        else:
            app.dependency_overrides[get_user] = lambda: SimpleAuthManagerUser(username=role, role=role)
        return TestClient(app, follow_redirects=False)

    yield client
    app.dependency_overrides.clear()


def barriers(ws: Workspace, count: int, lines: int = 5) -> list[int]:
    """``count`` barriers, each over one more landed batch; returns the records each registered."""
    landed = []
    for n in range(1, count + 1):
        landed.append(ws.land(n, lines=lines, partitions=1))
        assert orchestration.inject_barrier(ws.settings, JOB)["checkpoint_id"] == n
    return landed


def hrefs(page: str, rel: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(rf'<a rel="{rel}" href="([^"]*)"', page)]


def listed(page: str) -> list[int]:
    return [int(c) for c in re.findall(r'<tr data-checkpoint="(\d+)">', page)]


def test_an_empty_status_is_all_and_the_links_carry_no_empty_parameter(as_role, ws: Workspace) -> None:
    """30 checkpoints, 3 FAILED: two pages of all, one of FAILED; ``status=`` (an old link, the form's
    "all") is all, and every pager link names only the filter it keeps and a page after the first."""
    barriers(ws, 30, lines=1)
    for n in range(1, 31):
        if n % 10 == 0:
            ws.store.fail(JOB, n, FailureReason.TASK_DECLINED, "declined")
        else:
            ws.complete(n)
    admin = as_role("admin")
    first = admin.get(f"/jobs/{JOB}")
    assert first.status_code == 200 and listed(first.text) == list(range(30, 30 - PAGE_SIZE, -1))
    assert (hrefs(first.text, "next"), hrefs(first.text, "prev")) == ([f"/jobs/{JOB}?page=2"], [])

    for broken in (f"/jobs/{JOB}?status=&page=2", f"/jobs/{JOB}?page=2&status="):  # what the pager used to link
        older = admin.get(broken)
        assert older.status_code == 200, older.text
        assert listed(older.text) == list(range(30 - PAGE_SIZE, 0, -1))
        assert hrefs(older.text, "prev") == [f"/jobs/{JOB}"] and hrefs(older.text, "next") == []
    assert listed(admin.get(f"/jobs/{JOB}", params={"status": ""}).text) == listed(first.text)

    failed = admin.get(f"/jobs/{JOB}", params={"status": "FAILED"}).text
    assert listed(failed) == [30, 20, 10] and hrefs(failed, "next") == hrefs(failed, "prev") == []
    assert '<option value="FAILED" selected>' in failed
    # the "all" option sends no status at all
    assert ("""onchange="location.assign(this.value ? '?status=' + encodeURIComponent(this.value) """
            """: location.pathname)">""") in failed
    assert listing_query("COMPLETED", 2) == "?status=COMPLETED&page=2" and listing_query(None, 1) == ""
    past = admin.get(f"/jobs/{JOB}", params={"status": "FAILED", "page": 2})
    assert past.status_code == 404 and f'href="/jobs/{JOB}?status=FAILED"' in past.text

    api = admin.get(f"/api/jobs/{JOB}/checkpoints", params={"status": "", "limit": 5}).json()
    assert (api["status"], api["total"]) == (None, 30)
    assert admin.get(f"/jobs/{JOB}", params={"status": "NOPE"}).status_code == 422


def test_the_pages_numbers_read_alike_and_name_what_they_are(as_role, ws: Workspace) -> None:
    """Checkpoint 2 FAILED: its records are 3's, whose commit carried them; 3's snapshot wrote 2400 B (one
    subtask) in phases of 5 ms, 1.2 s and 3 min 4 s, 184 s after its barrier: the same words in the charts,
    the history and its page, once for the checkpoint and not per operator."""
    landed = barriers(ws, 3)
    ws.complete(1)
    ws.store.fail(JOB, 2, FailureReason.TASK_DECLINED, "declined")
    ws.store.ack_many(JOB, 3, [
        StateHandle(t.operator, t.subtask, state_bytes=2400 if (t.operator, t.subtask) == ("count", 0) else 0,
                    alignment_ms=5, sync_ms=1200, async_ms=184_000) for t in ws.job.execution_graph.tasks])
    triggered = datetime(2026, 3, 4, 21, 30, 5, tzinfo=UTC)
    with ws.store.sessions.begin() as s:
        s.execute(update(Checkpoint).where(Checkpoint.job == JOB, Checkpoint.checkpoint_id == 3).values(
            triggered_at=triggered, completed_at=triggered + timedelta(seconds=184)))
    admin = as_role("admin")

    records = {p["checkpoint_id"]: p["records"] for p in admin.get(f"/api/jobs/{JOB}/timeline").json()}
    assert records == {1: landed[0], 2: 0, 3: landed[1] + landed[2]}
    failed = admin.get(f"/jobs/{JOB}/checkpoints/2").text
    assert re.search(r'<td id="records">0 \(a failed checkpoint commits nothing', failed)
    page = admin.get(f"/jobs/{JOB}/checkpoints/3").text
    assert f'<td id="records">{landed[1] + landed[2]:,} (committed with this checkpoint' in page
    assert '<td id="triggered">2026-03-04 21:30:05 UTC</td>' in page
    assert '<td id="completed">2026-03-04 21:33:09 UTC</td>' in page
    assert '<td id="trigger-to-complete">3 min 4 s (' in page
    assert '<td id="bytes-written">2.3 KiB (' in page
    assert ('<td id="phases">alignment 5 ms, sync 1.2 s, async 3 min 4 s (measured once for the checkpoint, '
            'for all its operators)</td>') in page
    acks = re.search(r'<table id="acks">(.*?)</table>', page, re.S).group(1)
    assert "sync" not in acks and "alignment" not in acks and "2.3 KiB" in acks and "UTC" in acks

    listing = admin.get(f"/jobs/{JOB}").text
    row = re.search(r'<tr data-checkpoint="3">(.*?)</tr>', listing, re.S).group(1)
    assert '<td class="triggered">2026-03-04 21:30:05 UTC</td>' in row
    assert '<td class="num duration">3 min 4 s</td>' in row and '<td class="num bytes">2.3 KiB</td>' in row
    bar = html.unescape(re.search(r'data-chart="state".*?<g class="bar" data-checkpoint="3"><title>(.*?)</title>',
                                  listing, re.S).group(1))
    assert "count: 2.3 KiB" in bar.splitlines()
    phases = html.unescape(re.search(
        r'data-chart="durations".*?<g class="bar" data-checkpoint="3"><title>(.*?)</title>', listing, re.S).group(1))
    assert phases.splitlines()[1:] == ["alignment: 5 ms", "sync: 1.2 s", "async: 3 min 4 s"]
    assert " k B" not in listing and "k B<" not in listing


def committed(ws: Workspace, checkpoint_id: int, rows: int, finished_at: datetime,
              status: SinkTxnStatus = SinkTxnStatus.COMMITTED) -> None:
    with ws.store.sessions.begin() as s:
        s.add(SinkTransaction(job=JOB, checkpoint_id=checkpoint_id, sink=ws.job.sinks[0].name, status=status,
                              staged_uri=f"file:///state/chk-{checkpoint_id}/sink", rows=rows,
                              finished_at=finished_at))


def recovered(ws: Workspace, kind: recovery.RecoveryKind, restored: int) -> recovery.ResetOutcome:
    """What the recovery does to the catalog (``reset_after``, as ``absreplay recover|rewind`` runs it)."""
    rid = recovery.start(ws.store, JOB, kind, recovery.RecoveryMode.FULL, restored)
    outcome = recovery.reset_after(ws.store, ws.job, restored, rid, kind)
    recovery.finish(ws.store, rid, recovery.RecoveryResult.SUCCEEDED, restored=restored)
    return outcome


def test_the_confirmation_says_what_the_recovery_does_to_later_checkpoints(as_role, ws: Workspace) -> None:
    """A recover to the latest completed checkpoint with a PENDING one after it supersedes nothing and
    processes that one again; after a recover, a rewind replaces the SUPERSEDED checkpoints' output, still in
    the sink (their replays were deduplicated); after a rewind, a rewind does not list what the first one
    already reverted. Each time the page's list is what the recovery then does."""
    barriers(ws, 4)
    for n in (1, 2, 3):
        ws.complete(n)
    for n in (2, 3):
        committed(ws, n, 10 * n, EARLIER)
    admin = as_role("admin")
    sink = ws.job.sinks[0].name

    pending = recovery_runs.preview(ws.store.engine, JOB, 3, False)
    assert (pending.superseded, pending.processed_again, pending.later_output) == ([], [4], [])
    page = admin.get(f"/jobs/{JOB}/checkpoints/3/recover").text
    assert "supersede no checkpoint: no checkpoint after 3 is completed;" in page
    assert re.search(r'<li id="processed-again">process checkpoint\s+<span class="mono">4</span> \(PENDING\) '
                     r'again under its own id', page)
    assert recovered(ws, recovery.RecoveryKind.RECOVER, 3).superseded == []
    plan = run_plan.read(ws.store, ws.job, restored=3)
    assert [e.checkpoint_id for e in plan.epochs] == [4]  # the resumed run processes it, under its own id

    # a recover to 1: 2, 3 and 4 SUPERSEDED, replayed as 5, 6 and 7, whose commits are deduplicated
    assert recovered(ws, recovery.RecoveryKind.RECOVER, 1).superseded == [2, 3, 4]
    for n in (5, 6, 7):
        ws.complete(n)
        committed(ws, n, 0, EARLIER, SinkTxnStatus.DEDUPLICATED)
    rewind = recovery_runs.preview(ws.store.engine, JOB, 1, True)
    assert (rewind.superseded, [(o.sink, o.checkpoints, o.rows) for o in rewind.later_output]) == (
        [5, 6, 7], [(sink, [2, 3], 50)])
    text = html.unescape(admin.get(f"/jobs/{JOB}/checkpoints/1/recover", params={"rewind": "true"}).text)
    assert re.search(rf'<tr data-sink="{sink}"><td>{sink}</td><td class="mono">2, 3</td>\s*'
                     r'<td class="num">50</td><td>replaced</td>', text)
    # a rewind to a replay: the epochs after 5's are 3's and 4's, whose output (3's) is in the sink
    assert [o.checkpoints for o in recovery_runs.preview(ws.store.engine, JOB, 5, True).later_output] == [[3]]
    assert recovered(ws, recovery.RecoveryKind.REWIND, 1).superseded == rewind.superseded

    # that rewind reverted 2's and 3's rows; its replays 8, 9, 10 committed anew
    for n in (8, 9, 10):
        ws.complete(n)
        committed(ws, n, n, LATER)
    again = recovery_runs.preview(ws.store.engine, JOB, 1, True)
    assert (again.superseded, [(o.checkpoints, o.rows) for o in again.later_output]) == ([8, 9, 10], [([8, 9, 10], 27)])
    with ws.store.sessions() as s:
        statuses = dict(s.query(Checkpoint.checkpoint_id, Checkpoint.status).filter(Checkpoint.job == JOB).all())
    assert [c for c, st in sorted(statuses.items()) if st == CheckpointStatus.SUPERSEDED] == [2, 3, 4, 5, 6, 7]
    assert recovered(ws, recovery.RecoveryKind.REWIND, 1).superseded == again.superseded


def test_signed_out_a_page_goes_to_the_login_page_and_back(as_role, ws: Workspace) -> None:
    barriers(ws, 1)
    signed_out = as_role(None)
    for path in (f"/jobs/{JOB}?status=FAILED", f"/jobs/{JOB}/checkpoints/1", "/"):
        page = signed_out.get(path)
        assert page.status_code == 303, (path, page.status_code)
        login = urlsplit(page.headers["location"])
        assert login.path == urlsplit(SimpleAuthManager().get_url_login()).path
        assert parse_qs(login.query)["next"] == [f"http://testserver{path}"]
    api = signed_out.get(f"/api/jobs/{JOB}/checkpoints")
    assert api.status_code == 401 and api.json() == {"detail": "Not authenticated"}
    assert as_role("admin").get(f"/jobs/{JOB}").status_code == 200
