"""The ABS Replay view in a real ``airflow standalone``, driven in headless Chromium.

The job ran three epochs for real (on the worker's Spark session) and a fourth checkpoint
failed. Airflow knows an admin and a viewer (simple auth manager, a passwords
file). As the admin, the view inside Airflow's UI (``/plugin/absreplay``, an
iframe of the plugin's app) shows the history with the failure's reason.

Recovery from the view, on one Airflow: "Rewind to here" first says what would change
(checkpoint 3 superseded, the sink's output of checkpoint 3 replaced) and Cancel starts
nothing; "Recover to this checkpoint", confirmed while the recover DAG is paused, starts a
run the page shows queued with the DAG paused; a second click then starts nothing (the view
refuses it, naming the queued run); once the DAG is unpaused the page follows the same run
to success and its recovery is in ``recoveries`` and on the checkpoint's page. A rewind
while a processing run holds the job's lease fails, and the page says it was refused and
why, as the REFUSED row in ``recoveries`` does.

As the viewer: no button, and the same request from the browser is refused by Airflow
(403) with no run created; and every bad URL of tests/airflow/view_bad_urls.py gets its 404 or
422 as a page of the view saying what is wrong.

A longer history (30 checkpoints, made in the catalog without Spark), on another Airflow: a link
followed while signed out goes to Airflow's login page and, signed in there, back to it; the pager
and the status filter walk older, newer, a filter and back to all with no empty parameter in the URL;
the numbers read as a person reads them (binary units, human durations, UTC), alike in the charts and
the tables; the snapshot phases are shown once per checkpoint; a FAILED checkpoint's records are on
the next one; the confirmation of a recover names the PENDING checkpoint it processes again.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from sqlalchemy import update

from absreplay.airflow import orchestration
from coordinator.catalog.models import Checkpoint
from coordinator.checkpoints import recovery
from coordinator.checkpoints.lease import processing_lease
from coordinator.checkpoints.lifecycle import FailureReason
from coordinator.checkpoints.state_handle import StateHandle
from tests.airflow.airflow_standalone import Airflow, standalone
from tests.helpers import Workspace, make_workspace
from tests.airflow.view_bad_urls import BAD_PAGES

pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.heavy(seconds=150)]

JOB = "wordcount"
DAG = f"abs_{JOB}_recover"
USERS = {"admin": ("admin", "admin-secret"), "viewer": ("viewer", "viewer-secret")}
FAILURE_DETAIL = "subtask 1 of count declined the barrier"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
WAIT_S = 60


@pytest.fixture
def catalog(tmp_path: Path, pg_url: str, spark) -> Workspace:
    """Checkpoints 1-3 COMPLETED by a real processing run (one epoch per landed batch, on the worker's
    session: the recover run the click starts is the spark-submit this test is about), 4 FAILED."""
    ws = make_workspace(tmp_path, pg_url)
    for batch in range(3):
        ws.land(batch, lines=60)
        assert orchestration.inject_barrier(ws.settings, JOB)["checkpoint_id"] == batch + 1
    ws.run_epochs(spark)
    ws.coordinator.finalize()
    ws.land(3, lines=60)
    assert orchestration.inject_barrier(ws.settings, JOB)["checkpoint_id"] == 4
    ws.store.fail(JOB, 4, FailureReason.TASK_DECLINED, FAILURE_DETAIL)
    return ws


@pytest.fixture
def airflow(tmp_path: Path, catalog: Workspace, pg_url: str) -> Iterator[Airflow]:
    """The recover DAG starts paused (as every DAG here): the test unpauses it when it wants its runs to run."""
    with standalone(tmp_path, catalog, pg_url, users=USERS) as api:
        assert api.get(f"/dags/{DAG}")["is_paused"] is True
        yield api


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    assert shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER), "Chromium is missing: run `make chromium`"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # the network is closed: without these Chromium waits on connections it will never get
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER, log_output=str(tmp_path / "driver.log")))
    try:
        yield driver
    finally:
        driver.quit()


def sign_in(driver: webdriver.Chrome, api: Airflow, user: str) -> None:
    """The browser holds ``user``'s session: Airflow's JWT cookie, as its login page leaves it."""
    driver.get(f"{api.base}/api/v2/version")
    driver.delete_all_cookies()
    driver.add_cookie({"name": "_token", "value": api.login(user, USERS[user][1]).token, "path": "/"})


def wait(driver: webdriver.Chrome, locator: tuple[str, str]):
    return WebDriverWait(driver, WAIT_S).until(expected_conditions.presence_of_element_located(locator))


def shot(driver: webdriver.Chrome, tmp_path: Path, name: str) -> None:
    """A screenshot for a person to look at (the test reads the page, not the picture)."""
    driver.set_window_size(1100, 800)
    driver.save_screenshot(str(tmp_path / f"{name}.png"))


def run_line(driver: webdriver.Chrome, state: str) -> str:
    """The confirm page's line about the run it follows, once that run is in ``state``."""
    run = WebDriverWait(driver, WAIT_S * 4).until(
        lambda d: (e := d.find_element(By.ID, "run")).get_attribute("data-state") == state and e)
    return run.text


def post_recovery(driver: webdriver.Chrome, checkpoint: int, rewind: bool) -> tuple[int, dict]:
    """What a second click sends: the confirm button's request, from the same page."""
    return tuple(driver.execute_async_script(
        """const done = arguments[arguments.length - 1];
        fetch(`/absreplay/api/jobs/${arguments[0]}/recoveries`, {method: "POST", credentials: "same-origin",
              headers: {"Content-Type": "application/json"},
              body: JSON.stringify({checkpoint: arguments[1], rewind: arguments[2]})})
          .then(async r => done([r.status, await r.json()]));""", JOB, checkpoint, rewind))


def history(driver: webdriver.Chrome) -> dict[int, str]:
    rows = driver.find_elements(By.CSS_SELECTOR, "#checkpoints tr[data-checkpoint]")
    return {int(r.get_attribute("data-checkpoint")): r.find_elements(By.TAG_NAME, "td")[1].text for r in rows}


def test_recover_from_the_view_inside_airflow(airflow: Airflow, catalog: Workspace, browser, tmp_path: Path) -> None:
    sign_in(browser, airflow, "admin")
    browser.get(f"{airflow.base}/plugin/absreplay")  # Airflow's own UI, the view in its iframe
    frame = wait(browser, (By.CSS_SELECTOR, "iframe[src*='/absreplay/']"))
    browser.switch_to.frame(frame)
    wait(browser, (By.LINK_TEXT, JOB)).click()
    wait(browser, (By.ID, "checkpoints"))
    assert history(browser) == {1: "COMPLETED", 2: "COMPLETED", 3: "COMPLETED", 4: "FAILED"}
    for key in ("durations", "state", "records", "back_edge", "status"):
        assert len(browser.find_elements(By.CSS_SELECTOR, f'svg[data-chart="{key}"] g.bar')) == 4
    failed = browser.find_element(By.CSS_SELECTOR, '#checkpoints tr[data-checkpoint="4"]')
    assert "TASK_DECLINED" in failed.text
    assert not failed.find_elements(By.CSS_SELECTOR, ".trigger")  # no recovery to a failed checkpoint

    browser.find_element(By.LINK_TEXT, "2").click()  # checkpoint 2's page: its acks, then recover to it
    wait(browser, (By.ID, "acks"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#acks tr")) - 1 == len(catalog.job.execution_graph.tasks)

    # confirm: a rewind says what it would change, computed from the catalog; Cancel starts nothing
    browser.find_element(By.PARTIAL_LINK_TEXT, "Rewind to here").click()
    plan = wait(browser, (By.ID, "plan")).text
    assert "checkpoint 3:" in browser.find_element(By.ID, "superseded").text  # 4 FAILED: not superseded
    sinks = {r.get_attribute("data-sink"): r.text for r in browser.find_elements(By.CSS_SELECTOR, "#later-output tr[data-sink]")}
    assert set(sinks) == {s.name for s in catalog.job.sinks} and all(t.endswith("replaced") for t in sinks.values())
    assert "replace the sinks' output committed after checkpoint 2" in plan, plan
    shot(browser, tmp_path, "confirm-rewind")
    browser.find_element(By.ID, "cancel").click()
    wait(browser, (By.ID, "acks"))
    assert airflow.get(f"/dags/{DAG}/dagRuns")["total_entries"] == 0

    # the recover DAG is paused: the run the confirmation starts stays queued, and the page says why
    browser.find_element(By.PARTIAL_LINK_TEXT, "Recover to this checkpoint").click()
    assert "deduplicated" in wait(browser, (By.ID, "sinks")).text
    browser.find_element(By.ID, "confirm").click()
    line = run_line(browser, "queued")
    assert f"the DAG {DAG} is paused" in line, line
    assert browser.find_element(By.ID, "run").get_attribute("data-paused") == "true"
    link = browser.find_element(By.CSS_SELECTOR, "#run a.dag-run")
    run_id = link.get_attribute("data-run-id")
    run_page = f"/dags/{DAG}/runs/{quote(run_id, safe='')}"
    assert link.get_attribute("href").endswith(run_page)
    shot(browser, tmp_path, "queued-paused")

    # asked again while that run is queued (the button is disabled once clicked: back and confirm anew),
    # the view starts nothing, names the run under way and follows it
    browser.find_element(By.ID, "cancel").click()
    wait(browser, (By.PARTIAL_LINK_TEXT, "Recover to this checkpoint")).click()
    wait(browser, (By.ID, "confirm")).click()
    refused = WebDriverWait(browser, WAIT_S).until(
        lambda d: (e := d.find_element(By.ID, "refused")).is_displayed() and e.text)
    assert refused.startswith("nothing started: a recovery of wordcount is already under way") and run_id in refused
    assert run_line(browser, "queued") and browser.find_element(By.CSS_SELECTOR, "#run a.dag-run").get_attribute(
        "data-run-id") == run_id
    shot(browser, tmp_path, "second-click")
    assert post_recovery(browser, 2, False)[0] == 409
    assert airflow.get(f"/dags/{DAG}/dagRuns")["total_entries"] == 1

    # unpaused, the run goes on; the page follows it to its end
    assert airflow.call("PATCH", f"/dags/{DAG}", {"is_paused": False})[0] == 200
    line = run_line(browser, "success")
    (row,) = recovery.history(catalog.store, JOB)
    assert (row["kind"], row["requested_checkpoint_id"], row["from_checkpoint_id"], row["result"],
            row["airflow_run_id"]) == ("recover", 2, 2, "SUCCEEDED", run_id)
    assert f"success: recovery #{row['id']} SUCCEEDED" in line, line
    shot(browser, tmp_path, "success")
    assert airflow.get(f"/dags/{DAG}/dagRuns/{run_id}")["conf"] == {"checkpoint": 2, "mode": "full", "rewind": False}
    link = browser.find_element(By.CSS_SELECTOR, "#run a.dag-run")
    link.click()  # Airflow's UI (around the frame) moves to the run's page
    browser.switch_to.default_content()
    WebDriverWait(browser, WAIT_S).until(lambda d: d.current_url.endswith(run_page))
    browser.get(f"{airflow.base}/absreplay/jobs/{JOB}/checkpoints/2")
    recoveries = wait(browser, (By.ID, "recoveries")).text
    assert "SUCCEEDED" in recoveries and "recover" in recoveries

    # refused: a processing run holds the job's lease; the run fails and the page and `recoveries` say why
    browser.find_element(By.PARTIAL_LINK_TEXT, "Rewind to here").click()
    wait(browser, (By.ID, "plan"))
    with processing_lease(catalog.store.engine, JOB):
        browser.find_element(By.ID, "confirm").click()
        line = run_line(browser, "failed")
    refusal = recovery.history(catalog.store, JOB)[-1]
    assert (refusal["kind"], refusal["result"], refusal["requested_checkpoint_id"]) == ("rewind", "REFUSED", 2)
    assert "holds its lease" in refusal["detail"]
    refused_run = browser.find_element(By.CSS_SELECTOR, "#run a.dag-run").get_attribute("data-run-id")
    assert refusal["airflow_run_id"] == refused_run != run_id
    assert line.endswith(f"failed: refused (recovery #{refusal['id']}, nothing changed): {refusal['detail']}"), line
    shot(browser, tmp_path, "refused")
    browser.get(f"{airflow.base}/absreplay/jobs/{JOB}/checkpoints/2")
    assert "REFUSED" in wait(browser, (By.ID, "recoveries")).text

    # the viewer reads the same history, gets no button, and Airflow refuses the trigger from their browser
    sign_in(browser, airflow, "viewer")
    browser.get(f"{airflow.base}/absreplay/jobs/{JOB}")
    wait(browser, (By.ID, "checkpoints"))
    assert set(history(browser)) >= {1, 2, 3, 4}
    assert not browser.find_elements(By.CSS_SELECTOR, ".trigger")
    browser.get(f"{airflow.base}/absreplay/jobs/{JOB}/checkpoints/3")
    wait(browser, (By.ID, "acks"))
    assert not browser.find_elements(By.CSS_SELECTOR, ".trigger")
    runs_before = airflow.get(f"/dags/{DAG}/dagRuns")["total_entries"]
    status = browser.execute_async_script(
        """const done = arguments[arguments.length - 1];
        fetch(`/api/v2/dags/${arguments[0]}/dagRuns`, {method: "POST", credentials: "same-origin",
              headers: {"Content-Type": "application/json"},
              body: JSON.stringify({logical_date: null, conf: {checkpoint: 3}})}).then(r => done(r.status));""",
        DAG)
    assert status == 403
    assert airflow.get(f"/dags/{DAG}/dagRuns")["total_entries"] == runs_before

    # bad URLs: never a 500; each a page of the view that says what is wrong
    for path, expected, message in BAD_PAGES:
        url = f"{airflow.base}/absreplay{path}"
        status = browser.execute_async_script(
            """const done = arguments[arguments.length - 1];
            fetch(arguments[0], {credentials: "same-origin"}).then(r => done(r.status));""", url)
        browser.get(url)
        assert (status, message in wait(browser, (By.ID, "error")).text) == (expected, True), path


#: the longer history: checkpoints 1-29 COMPLETED but 10 and 20 FAILED, 30 PENDING
MANY = 30
MANY_FAILED = (10, 20)
#: checkpoint 29's barrier: its snapshot took 5 ms, 1.2 s and 3 min 4 s, and it completed 184 s later
TRIGGERED_29 = datetime(2026, 3, 4, 21, 30, 5, tzinfo=UTC)


@pytest.fixture
def many(tmp_path: Path, pg_url: str) -> tuple[Workspace, list[int]]:
    """30 barriers over one landed batch each; returns the workspace and the records each barrier registered."""
    ws = make_workspace(tmp_path, pg_url)
    landed = []
    for n in range(1, MANY + 1):
        landed.append(ws.land(n, lines=3, partitions=1))
        assert orchestration.inject_barrier(ws.settings, JOB)["checkpoint_id"] == n
        if n in MANY_FAILED:
            ws.store.fail(JOB, n, FailureReason.TASK_DECLINED, FAILURE_DETAIL)
        elif n == 29:  # 2400 B written by one subtask of count: 2.3 KiB in the table and on the chart alike
            ws.store.ack_many(JOB, n, [StateHandle(
                t.operator, t.subtask, state_bytes=2400 if (t.operator, t.subtask) == ("count", 0) else 0,
                alignment_ms=5, sync_ms=1200, async_ms=184_000) for t in ws.job.execution_graph.tasks])
        elif n < MANY:
            ws.complete(n)
    with ws.store.sessions.begin() as s:
        s.execute(update(Checkpoint).where(Checkpoint.job == JOB, Checkpoint.checkpoint_id == 29).values(
            triggered_at=TRIGGERED_29, completed_at=TRIGGERED_29 + timedelta(seconds=184)))
    return ws, landed


def listed(driver: webdriver.Chrome) -> list[int]:
    return [int(r.get_attribute("data-checkpoint"))
            for r in driver.find_elements(By.CSS_SELECTOR, "#checkpoints tr[data-checkpoint]")]


def after_click(driver: webdriver.Chrome, element) -> str:
    """Click a link or change that loads the next page; returns its URL once it is there."""
    element.click()
    WebDriverWait(driver, WAIT_S).until(expected_conditions.staleness_of(element))
    wait(driver, (By.ID, "checkpoints"))
    return driver.current_url


def test_a_long_history_pages_filters_and_reads_plainly(many, tmp_path: Path, pg_url: str, browser) -> None:
    ws, landed = many
    with standalone(tmp_path, ws, pg_url, users=USERS) as api:
        # signed out: a link to a page goes to Airflow's login page, which brings the user back to it
        page = f"{api.base}/absreplay/jobs/{JOB}/checkpoints/21"
        browser.get(page)
        WebDriverWait(browser, WAIT_S).until(lambda d: urlsplit(d.current_url).path.startswith("/auth/login"))
        assert parse_qs(urlsplit(browser.current_url).query)["next"] == [page]
        name = wait(browser, (By.CSS_SELECTOR, "input[name='username']"))
        name.send_keys("admin")
        browser.find_element(By.CSS_SELECTOR, "input[type='password']").send_keys(USERS["admin"][1], Keys.ENTER)
        WebDriverWait(browser, WAIT_S).until(lambda d: d.current_url == page)
        # checkpoint 20 FAILED: 21's commit carried its records
        assert wait(browser, (By.ID, "records")).text.startswith(f"{landed[19] + landed[20]:,} (committed with")
        browser.get(f"{api.base}/absreplay/jobs/{JOB}/checkpoints/20")
        assert wait(browser, (By.ID, "records")).text.startswith("0 (a failed checkpoint commits nothing")

        # the pager and the filter, both ways; no URL carries an empty parameter
        base = f"{api.base}/absreplay/jobs/{JOB}"
        browser.get(base)
        wait(browser, (By.ID, "checkpoints"))
        assert listed(browser) == list(range(MANY, MANY - 25, -1))
        shot(browser, tmp_path, "history-page-1")
        assert after_click(browser, browser.find_element(By.LINK_TEXT, "older")) == f"{base}?page=2"
        assert listed(browser) == list(range(MANY - 25, 0, -1))
        assert "page 2 of 2" in browser.find_element(By.TAG_NAME, "form").text
        assert after_click(browser, browser.find_element(By.LINK_TEXT, "newer")) == base
        assert listed(browser) == list(range(MANY, MANY - 25, -1))
        Select(browser.find_element(By.ID, "status-filter")).select_by_visible_text("FAILED")
        WebDriverWait(browser, WAIT_S).until(lambda d: d.current_url == f"{base}?status=FAILED")
        wait(browser, (By.ID, "checkpoints"))
        assert listed(browser) == sorted(MANY_FAILED, reverse=True)
        assert not browser.find_elements(By.LINK_TEXT, "older")
        shot(browser, tmp_path, "history-failed")
        Select(browser.find_element(By.ID, "status-filter")).select_by_visible_text("all")
        WebDriverWait(browser, WAIT_S).until(lambda d: d.current_url == base)
        wait(browser, (By.ID, "checkpoints"))
        assert listed(browser) == list(range(MANY, MANY - 25, -1))
        assert after_click(browser, browser.find_element(By.LINK_TEXT, "older")) == f"{base}?page=2"
        browser.get(f"{base}?status=&page=2")  # a link of the broken pager, bookmarked
        wait(browser, (By.ID, "checkpoints"))
        assert listed(browser) == list(range(MANY - 25, 0, -1))

        # numbers as a person reads them, alike in the chart and the table; phases once per checkpoint
        browser.get(base)
        row = wait(browser, (By.CSS_SELECTOR, '#checkpoints tr[data-checkpoint="29"]'))
        cell = {c: row.find_element(By.CSS_SELECTOR, f"td.{c}").text for c in ("triggered", "duration", "bytes")}
        assert cell == {"triggered": "2026-03-04 21:30:05 UTC", "duration": "3 min 4 s", "bytes": "2.3 KiB"}
        hover = browser.find_element(By.CSS_SELECTOR, 'svg[data-chart="state"] g.bar[data-checkpoint="29"] title')
        assert "count: 2.3 KiB" in hover.get_attribute("textContent").splitlines()
        phases = browser.find_element(By.CSS_SELECTOR, 'svg[data-chart="durations"] g.bar[data-checkpoint="29"] title')
        assert phases.get_attribute("textContent").splitlines()[1:] == [
            "alignment: 5 ms", "sync: 1.2 s", "async: 3 min 4 s"]
        browser.find_element(By.LINK_TEXT, "29").click()
        assert wait(browser, (By.ID, "phases")).text.startswith("alignment 5 ms, sync 1.2 s, async 3 min 4 s")
        headers = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#acks th")]
        assert not any("ms" in h or "sync" in h for h in headers), headers
        assert browser.find_element(By.ID, "completed").text == "2026-03-04 21:33:09 UTC"
        shot(browser, tmp_path, "checkpoint-29")

        # recover to the latest completed checkpoint: 30 is PENDING, processed again, not superseded
        browser.find_element(By.PARTIAL_LINK_TEXT, "Recover to this checkpoint").click()
        assert wait(browser, (By.ID, "superseded")).text.startswith("supersede no checkpoint: no checkpoint after 29")
        assert browser.find_element(By.ID, "processed-again").text.startswith(
            "process checkpoint 30 (PENDING) again under its own id")
        shot(browser, tmp_path, "confirm-pending")
