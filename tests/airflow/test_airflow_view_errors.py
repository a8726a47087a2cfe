"""Bad URLs of the ABS Replay view never give a 500: on SQLite and PostgreSQL catalogs.

In process, as tests/airflow/test_airflow_view.py: the plugin's app with Airflow's simple auth manager.
Every page of tests/airflow/view_bad_urls.py gets its 404 or 422 as an HTML page in the view's layout
(its navigation, a heading, the message, a link onwards), never JSON nor a traceback; every
JSON call gets FastAPI's JSON error. The largest numbers the bounds let through reach the
database and find nothing; a page past the last links to the last one, which exists.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest

from absreplay.commands.airflow_demo import isolate_airflow_home

isolate_airflow_home()  # before airflow is imported: its configuration is read once

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager  # noqa: E402
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser  # noqa: E402
from airflow.api_fastapi.core_api.security import get_user  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from absreplay.airflow import orchestration  # noqa: E402
from absreplay.airflow_plugin.access import auth_manager  # noqa: E402
from absreplay.airflow_plugin.app import PAGE_SIZE, app  # noqa: E402
from absreplay.airflow_plugin.catalog import catalog_engine  # noqa: E402
from coordinator.arguments import BIGINT_MAX  # noqa: E402
from coordinator.checkpoints.state_handle import StateHandle  # noqa: E402
from tests.helpers import make_workspace  # noqa: E402
from tests.airflow.view_bad_urls import BAD_API_CALLS, BAD_PAGES  # noqa: E402

JOB = "wordcount"
ERROR = re.compile(r'<p id="error" class="error">(.*?)</p>', re.S)


@pytest.fixture
def client(tmp_path, catalog_url: str) -> Iterator[TestClient]:
    """An admin's client of the view over 3 checkpoints of wordcount (2 COMPLETED, 1 PENDING): one page."""
    ws = make_workspace(tmp_path, catalog_url)
    for n in (1, 2, 3):
        ws.land(n, lines=5, partitions=1)
        assert orchestration.inject_barrier(ws.settings, JOB)["checkpoint_id"] == n
        if n < 3:
            ws.store.ack_many(JOB, n, [StateHandle(t.operator, t.subtask, state_bytes=10 * n)
                                       for t in ws.job.execution_graph.tasks])
    app.dependency_overrides[auth_manager] = SimpleAuthManager
    app.dependency_overrides[catalog_engine] = lambda: ws.store.engine
    app.dependency_overrides[get_user] = lambda: SimpleAuthManagerUser(username="admin", role="admin")
    yield TestClient(app, raise_server_exceptions=False)
    app.dependency_overrides.clear()


def error_message(page: str) -> str:
    found = ERROR.search(page)
    assert found, page
    return html.unescape(found.group(1))


def test_no_bad_page_gives_a_500_and_each_says_what_is_wrong(client: TestClient) -> None:
    assert len(BAD_PAGES) > 15
    for path, status, message in BAD_PAGES:
        r = client.get(path)
        assert (r.status_code, r.headers["content-type"].split(";")[0]) == (status, "text/html"), (path, r.text)
        page = r.text
        assert '<nav><a href="/">ABS Replay</a>' in page  # the view's own layout, not a bare error
        assert "<h1>" + ("Not found" if status == 404 else "Bad request") + "</h1>" in page, path
        assert message in error_message(page), (path, error_message(page))
        assert '{"detail"' not in page and "Traceback" not in page


def test_a_page_past_the_last_links_to_the_last_page(client: TestClient) -> None:
    r = client.get(f"/jobs/{JOB}", params={"page": 99})
    assert r.status_code == 404
    assert error_message(r.text) == (f"there is no page 99 of the checkpoints of {JOB}: 3 checkpoint(s) fill "
                                     f"1 page(s) of {PAGE_SIZE}")
    (link,) = re.findall(r'<a id="error-link" href="([^"]+)">the last page \(1\)</a>', r.text)
    last = client.get(html.unescape(link))
    assert last.status_code == 200 and "page 1 of 1" in last.text
    # a filter with nothing in it still has its one (empty) page
    empty = client.get(f"/jobs/{JOB}", params={"status": "FAILED"})
    assert empty.status_code == 200 and "0 checkpoint(s)</span>, page 1 of 1" in empty.text


def test_no_bad_api_call_gives_a_500(client: TestClient) -> None:
    for path, status in BAD_API_CALLS:
        r = client.get(path)
        assert (r.status_code, r.headers["content-type"]) == (status, "application/json"), (path, r.text)
        assert r.json()["detail"], path
    # the largest offset the bounds allow reaches the database: an empty page, not an overflow
    page = client.get(f"/api/jobs/{JOB}/checkpoints", params={"offset": BIGINT_MAX}).json()
    assert (page["total"], page["offset"], page["rows"]) == (3, BIGINT_MAX, [])
