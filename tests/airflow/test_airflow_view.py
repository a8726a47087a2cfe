"""The Airflow view's endpoints on a PostgreSQL catalog, as Airflow users of the simple auth manager.

In process: the plugin's FastAPI app with Airflow's real ``SimpleAuthManager``
deciding (admin, user and viewer roles); only the user (normally from the JWT)
and the catalog engine (normally from the Variable) are handed in. Paging and
the status filter over the whole history, a FAILED checkpoint's reason and
detail, a checkpoint's acks, sink transaction, dead letters and recoveries, the
records of each epoch, and who gets the recover buttons and who a 403.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from absreplay.commands.airflow_demo import isolate_airflow_home

isolate_airflow_home()  # before airflow is imported: its configuration is read once

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager  # noqa: E402
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser  # noqa: E402
from airflow.api_fastapi.core_api.security import get_user  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import update  # noqa: E402

from absreplay.airflow import orchestration  # noqa: E402
from absreplay.airflow_plugin import AbsReplayPlugin  # noqa: E402
from absreplay.airflow_plugin.access import auth_manager  # noqa: E402
from absreplay.airflow_plugin.app import app  # noqa: E402
from absreplay.airflow_plugin.catalog import catalog_engine  # noqa: E402
from coordinator.catalog.models import Checkpoint, DeadLetter, SinkTransaction, dead_letter_columns  # noqa: E402
from coordinator.checkpoints import recovery  # noqa: E402
from coordinator.checkpoints.lifecycle import FailureReason, SinkTxnStatus  # noqa: E402
from coordinator.checkpoints.state_handle import StateHandle  # noqa: E402
from tests.helpers import Workspace, make_workspace  # noqa: E402

JOB = "wordcount"
CHECKPOINTS = 30
FAILED = {7: "state root unreachable: /state/chk-7", 19: "subtask 1 of count declined"}
BATCH_LINES = 10
#: records landed before each barrier: the epoch of checkpoint n holds LANDED[n]
LANDED: dict[int, int] = {}


def carried(n: int) -> int:
    """The records checkpoint n's commit carries: none for a FAILED one, whose epoch goes with the next one."""
    if n in FAILED:
        return 0
    return LANDED[n] + (LANDED[n - 1] if n - 1 in FAILED else 0)


@pytest.fixture
def catalog(tmp_path: Path, pg_url: str) -> Workspace:
    """30 checkpoints of wordcount, each over one more landed batch; 7 and 19 FAILED, 30 PENDING,
    the rest COMPLETED with sized acks; checkpoint 5 has a sink transaction, dead letters and a recovery."""
    ws = make_workspace(tmp_path, pg_url)
    for n in range(1, CHECKPOINTS + 1):
        LANDED[n] = ws.land(n, lines=BATCH_LINES + n % 3, partitions=2)
        assert orchestration.inject_barrier(ws.settings, JOB)["checkpoint_id"] == n
        if n in FAILED:
            ws.store.fail(JOB, n, FailureReason.TASK_DECLINED, FAILED[n])
        elif n < CHECKPOINTS:
            ws.store.ack_many(JOB, n, [
                StateHandle(t.operator, t.subtask, state_uri=f"file:///state/chk-{n}/{t.operator}/{t.subtask}",
                            state_bytes=100 * n + t.subtask, state_rows=n, checksum=f"{n:064x}",
                            alignment_ms=1, sync_ms=2 + t.subtask, async_ms=10 * n)
                for t in ws.job.execution_graph.tasks])
    with ws.store.sessions.begin() as s:
        s.add(SinkTransaction(job=JOB, checkpoint_id=5, sink="wordcount_counts", status=SinkTxnStatus.COMMITTED,
                              staged_uri="file:///state/chk-5/sink", rows=42, files=2, bytes=2048,
                              checksum="ab" * 32))
        s.add_all(DeadLetter(job=JOB, checkpoint_id=5, partition="p0", segment="seg-5", offset=i,
                             **dead_letter_columns("not UTF-8", b"\xff%d" % i)) for i in range(3))
    rid = recovery.start(ws.store, JOB, recovery.RecoveryKind.RECOVER, recovery.RecoveryMode.FULL, 5)
    recovery.finish(ws.store, rid, recovery.RecoveryResult.SUCCEEDED, restored=5)
    return ws


@pytest.fixture
def as_role(catalog: Workspace) -> Iterator:
    """``as_role(role)``: a client of the view signed in with that simple-auth-manager role."""
    app.dependency_overrides[auth_manager] = SimpleAuthManager
    app.dependency_overrides[catalog_engine] = lambda: catalog.store.engine

    def client(role: str) -> TestClient:
        app.dependency_overrides[get_user] = lambda: SimpleAuthManagerUser(username=role, role=role)
        return TestClient(app)

    yield client
    app.dependency_overrides.clear()


def test_the_plugin_mounts_the_app_and_a_nav_entry() -> None:
    (mount,) = AbsReplayPlugin.fastapi_apps
    assert (mount["app"], mount["url_prefix"]) == (app, "/absreplay")
    assert AbsReplayPlugin.external_views[0]["href"] == "/absreplay/"


def test_pages_through_the_whole_history_newest_first(as_role) -> None:
    api = as_role("admin")
    seen = []
    for offset in range(0, CHECKPOINTS, 8):
        page = api.get(f"/api/jobs/{JOB}/checkpoints", params={"offset": offset, "limit": 8}).json()
        assert (page["total"], page["offset"]) == (CHECKPOINTS, offset)
        seen += [r["checkpoint_id"] for r in page["rows"]]
    assert seen == list(range(CHECKPOINTS, 0, -1))
    assert api.get(f"/api/jobs/{JOB}/checkpoints", params={"limit": 501}).status_code == 422


def test_filters_by_status_and_names_the_failure(as_role) -> None:
    api = as_role("admin")
    failed = api.get(f"/api/jobs/{JOB}/checkpoints", params={"status": "FAILED"}).json()
    assert failed["total"] == 2
    assert [(r["checkpoint_id"], r["failure_reason"]) for r in failed["rows"]] == [
        (19, "TASK_DECLINED"), (7, "TASK_DECLINED")]
    pending = api.get(f"/api/jobs/{JOB}/checkpoints", params={"status": "PENDING"}).json()
    assert [r["checkpoint_id"] for r in pending["rows"]] == [CHECKPOINTS]
    completed = api.get(f"/api/jobs/{JOB}/checkpoints", params={"status": "COMPLETED", "limit": 100}).json()
    assert completed["total"] == CHECKPOINTS - 3
    assert api.get(f"/api/jobs/{JOB}/checkpoints", params={"status": "NOPE"}).status_code == 422

    detail = api.get(f"/api/jobs/{JOB}/checkpoints/7").json()
    assert (detail["summary"]["status"], detail["summary"]["failure_reason"]) == ("FAILED", "TASK_DECLINED")
    assert detail["failure_detail"] == FAILED[7]
    assert detail["actions"] == []  # a failed checkpoint is no recovery point
    page = api.get(f"/jobs/{JOB}/checkpoints/7")
    assert page.status_code == 200
    assert "TASK_DECLINED" in page.text and FAILED[7] in page.text


def test_a_checkpoint_page_holds_acks_sink_dead_letters_and_recoveries(as_role, catalog: Workspace) -> None:
    api = as_role("admin")
    d = api.get(f"/api/jobs/{JOB}/checkpoints/5").json()
    tasks = catalog.job.execution_graph.tasks
    assert len(d["acks"]) == len(tasks) == d["summary"]["acked_tasks"]
    ack = next(a for a in d["acks"] if a["subtask"] == 1)
    assert (ack["state_bytes"], ack["state_rows"], ack["checksum"], ack["sync_ms"], ack["async_ms"]) == (
        501, 5, f"{5:064x}", 3, 50)
    assert ack["state_uri"].startswith("file:///state/chk-5/")
    (txn,) = d["sink_transactions"]
    assert (txn["status"], txn["rows"], txn["files"], txn["bytes"]) == ("COMMITTED", 42, 2, 2048)
    assert d["dead_letter_count"] == 3 and [x["offset"] for x in d["dead_letters"]] == [0, 1, 2]
    # readable, and exact: the bytes that are not UTF-8 in base64
    assert [(x["payload"], base64.b64decode(x["payload_bytes"])) for x in d["dead_letters"]] == [
        (f"\\xff{i}", b"\xff%d" % i) for i in range(3)]
    (rec,) = d["recoveries"]
    assert (rec["kind"], rec["from_checkpoint_id"], rec["result"]) == ("recover", 5, "SUCCEEDED")
    assert d["records"] == LANDED[5] and sum(d["cut"].values()) == sum(LANDED[n] for n in range(1, 6))
    assert api.get(f"/api/jobs/{JOB}/checkpoints/6").json()["recoveries"] == []
    assert api.get(f"/api/jobs/{JOB}/checkpoints/999").status_code == 404
    assert api.get("/api/jobs/nojob/checkpoints").status_code == 404


def test_dead_letters_show_with_their_share_and_first_reasons(as_role, catalog: Workspace) -> None:
    """Checkpoint 5's epoch: its 3 dead letters and one of another reason, of its LANDED[5] = 24 records, on
    its page and in the list."""
    with catalog.store.sessions.begin() as s:
        s.add(DeadLetter(job=JOB, checkpoint_id=5, partition="p1", segment="seg-5", offset=9,
                         reason='field "user" is missing', payload="{}"))
    api = as_role("admin")
    assert LANDED[5] == 24
    figures = api.get(f"/api/jobs/{JOB}/checkpoints/5").json()["dead_letter_figures"]
    assert figures == {"count": 4, "records": 24, "share": 4 / 24, "reasons": ["not UTF-8", 'field "user" is missing']}
    page = api.get(f"/jobs/{JOB}/checkpoints/5").text
    assert page.count('title="not UTF-8 text without NUL: shown with \\xNN escapes') == 3  # not the "{}"
    assert ('<td id="dead-letter-share">4 (16.7% of the epoch\'s records); first reasons: <q>not UTF-8</q>, '
            '<q>field &#34;user&#34; is missing</q></td>') in page
    quiet = api.get(f"/jobs/{JOB}/checkpoints/6").text
    assert '<td id="dead-letter-share">0 (0% of the epoch\'s records)</td>' in quiet
    rows = api.get(f"/api/jobs/{JOB}/checkpoints", params={"offset": 25, "limit": 2}).json()["rows"]
    assert [(r["checkpoint_id"], r["dead_letters"]["count"]) for r in rows] == [(5, 4), (4, 0)]
    listing = api.get(f"/jobs/{JOB}", params={"page": 2}).text
    assert ('title="first reasons: not UTF-8; field &#34;user&#34; is missing">4 (16.7%)</td>') in listing


def test_the_timeline_feeds_every_chart(as_role) -> None:
    api = as_role("admin")
    points = api.get(f"/api/jobs/{JOB}/timeline").json()
    assert [p["checkpoint_id"] for p in points] == list(range(1, CHECKPOINTS + 1))
    assert [p["records"] for p in points] == [carried(n) for n in range(1, CHECKPOINTS + 1)]
    assert (points[6]["records"], points[7]["records"]) == (0, LANDED[7] + LANDED[8])
    p5 = points[4]
    assert (p5["alignment_ms"], p5["sync_ms"], p5["async_ms"]) == (1, 3, 50)
    assert p5["state_bytes_by_operator"]["count"] == 500 + 501
    assert points[6]["failure_detail"] == FAILED[7]
    html = api.get(f"/jobs/{JOB}").text
    for key in ("durations", "state", "records", "back_edge", "status"):
        assert f'data-chart="{key}"' in html
    assert html.count('class="bar" data-checkpoint=') == 5 * CHECKPOINTS


def test_only_who_may_trigger_the_recover_dag_gets_the_buttons(as_role) -> None:
    for role in ("admin", "user"):
        api = as_role(role)
        row = api.get(f"/api/jobs/{JOB}/checkpoints", params={"offset": 25, "limit": 1}).json()["rows"][0]
        assert row["checkpoint_id"] == 5
        assert [(a["dag_id"], a["conf"]) for a in row["actions"]] == [
            ("abs_wordcount_recover", {"checkpoint": 5, "mode": "full", "rewind": False}),
            ("abs_wordcount_recover", {"checkpoint": 5, "mode": "full", "rewind": True})]
        assert "Recover to this checkpoint" in api.get(f"/jobs/{JOB}/checkpoints/5").text

    viewer = as_role("viewer")
    page = viewer.get(f"/api/jobs/{JOB}/checkpoints").json()
    assert page["can_trigger"] is False and all(r["actions"] == [] for r in page["rows"])
    for path in (f"/jobs/{JOB}", f"/jobs/{JOB}/checkpoints/5"):
        html = viewer.get(path).text
        assert "checkpoint" in html and "Recover to this checkpoint" not in html and "Rewind" not in html


def test_a_weak_job_is_labelled_and_offers_no_recovery(as_role, catalog: Workspace) -> None:
    """A weak-consistency job's checkpoints (snapshot mode "weak") are no consistent point to go back to:
    its pages say what it is, and even an admin gets no recover or rewind button."""
    from coordinator.checkpoints import weak

    with catalog.store.sessions.begin() as s:
        s.execute(update(Checkpoint).where(Checkpoint.job == JOB).values(snapshot_mode="weak"))
    admin = as_role("admin")
    page = admin.get(f"/api/jobs/{JOB}/checkpoints").json()
    assert page["weak"] is True and all(r["actions"] == [] for r in page["rows"])
    assert admin.get(f"/api/jobs/{JOB}/checkpoints/5").json()["actions"] == []
    for path in (f"/jobs/{JOB}", f"/jobs/{JOB}/checkpoints/5"):
        html = admin.get(path).text
        assert f'<p id="weak" class="weak">{weak.LABEL}</p>' in html
        assert "Recover to this checkpoint" not in html and "Rewind" not in html


def test_a_user_without_a_role_is_refused(as_role) -> None:
    nobody = as_role("")  # the simple auth manager grants nothing to a user without a role
    assert nobody.get(f"/api/jobs/{JOB}/checkpoints").status_code == 403
    assert nobody.get(f"/jobs/{JOB}/checkpoints/5").status_code == 403
    assert nobody.get("/api/jobs").json() == []


def test_a_replay_checkpoint_counts_the_epoch_it_redoes() -> None:
    from coordinator.catalog.epochs import epoch_records

    cuts = {1: {"p0": 5}, 2: {"p0": 9, "p1": 4}, 3: {"p0": 12, "p1": 4}, 4: {"p0": 9, "p1": 4}, 5: {"p0": 12, "p1": 4},
            6: {"p0": 20, "p1": 6}}
    # a recovery to 1 replayed 2 and 3 as 4 and 5 (5 a replay of the replay... of 3); 6 is new
    assert epoch_records(cuts, {4: 2, 5: 3, 6: None}) == {1: 5, 2: 8, 3: 3, 4: 8, 5: 3, 6: 10}
