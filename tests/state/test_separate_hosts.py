"""Keyed state on a cluster of hosts that share only the state root, the input and the catalog.

Two workers and the driver each on a host of their own (tests/state/separate_hosts.py: own address, own mount
namespace, a private tmpfs over each local directory), wordcount through the command line:

- the first run builds each subtask's store on the executor that runs it, from nothing;
- the next run, a new application with new executors, sends each store task back to the host that holds
  its store (``task_acks.store_location``): every store task is a hit;
- a worker is SIGKILLed with its executors while a run is in an epoch and comes back with an empty
  disk: the store task it held runs elsewhere and reloads its store from the checkpoint's files, the run
  goes on, and the sink equals an independent recount; ``absreplay verify`` agrees.

``verify`` runs on the test's own session: it recomputes from the input, the catalog and the state root,
which every host shares, so a cluster application of its own (a driver and two executors) would check
nothing more.

Then, on the same cluster, a job with a join and an event-time window (tests/jobs/views_by_country.py,
whose state is on DataFrames, shuffled between the hosts): a worker lost inside an epoch takes the state
the run held in its memory; the run starts over from the newest completed checkpoint
(``spark_jobs.run.executor_loss``) and goes on: both sinks equal a plain-Python reference, ``absreplay
verify`` exit 0.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from coordinator.dataflow.discovery import get_job
from tests import views_data
from tests.helpers import ABSREPLAY, JOBS_DIR, cli_ok, make_workspace
from tests.state.separate_hosts import SeparateHosts, separate_hosts

# both tests on one cluster: one xdist worker
pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.xdist_group("separate_hosts")]
JOBS = str(JOBS_DIR)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> SeparateHosts:
    with separate_hosts(tmp_path_factory.mktemp("hosts"), workers=2) as cluster:
        yield cluster


class Driver:
    """``absreplay`` commands of workspace ``ws`` run by a driver host of their own."""

    def __init__(self, hosts: SeparateHosts, ws, env: dict[str, str] | None = None) -> None:
        self.hosts, self.ws, self.env = hosts, ws, env or {}

    def start(self, *args: str, faults: str = "") -> subprocess.Popen:
        env = {**os.environ, **self.ws.env(), **self.hosts.driver_env("driver"), **self.env, "ABS_FAULTS": faults}
        return subprocess.Popen(self.hosts.command("driver", [ABSREPLAY, *args]), env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def ok(self, *args: str) -> str:
        proc = self.start(*args)
        out, _ = proc.communicate(timeout=600)
        assert "ABS fault point" not in out and proc.returncode == 0, out[-3000:]
        return out

    def lose_a_host_inside(self, epoch: int, lost: int, *args: str) -> str:
        """Run ``args`` with epoch ``epoch`` held 20 s; meanwhile worker ``lost`` is SIGKILLed and comes back
        empty. The run must still succeed: its output."""
        run = self.start(*args, faults=f"epoch.compute@{epoch}=sleep:20")
        seen: list[str] = []
        reached = threading.Event()

        def pump() -> None:
            for line in run.stdout:
                seen.append(line)
                if f"ABS fault point epoch.compute@{epoch}" in line:
                    reached.set()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        deadline = time.monotonic() + 300
        while not reached.wait(1):  # a run that ends without reaching the epoch fails the test at once
            assert run.poll() is None and time.monotonic() < deadline, "".join(seen[-40:])
        self.hosts.kill(lost)
        self.hosts.start(lost)
        assert run.wait(600) == 0, "".join(seen[-60:])
        reader.join(30)
        return "".join(seen)


def store_events(ws, checkpoint_id: int) -> dict[int, tuple[str, int, str]]:
    """Subtask -> (hit or reload, reload ms, executor) of the count operator's acks of ``checkpoint_id``."""
    return {a.subtask: (a.store_event, a.store_load_ms, a.store_location)
            for a in ws.store.acks(ws.job.name, checkpoint_id) if a.operator == "count"}


@pytest.mark.heavy(seconds=150)
def test_stores_stay_on_their_hosts_and_a_lost_host_costs_a_reload_never_data(tmp_path, pg_url, hosts, spark,
                                                                             summary) -> None:
    ws = make_workspace(tmp_path, pg_url)
    driver = Driver(hosts, ws)

    def cycle(batch: int) -> str:
        ws.land(batch, lines=3000, vocab=2000)
        ws.coordinator.inject()
        out = driver.ok("process", ws.job.name)
        driver.ok("finalize", ws.job.name)
        assert ws.committed() == ws.expected_latest(), out
        return out

    first = cycle(0)
    assert {e for e, _, _ in store_events(ws, 1).values()} == {"reload"}, first  # built from nothing
    # each store lives on the host that built it, nowhere else: not even visible from outside its namespace
    assert [list(hosts.local_dir(i).iterdir()) for i in range(2)] == [[], []]
    places = {i: where for i, (_, _, where) in store_events(ws, 1).items()}
    assert {where.split("_")[1] for where in places.values()} <= {hosts.address(0), hosts.address(1)}, places

    second = cycle(1)
    events = store_events(ws, 2)
    assert {e for e, _, _ in events.values()} == {"hit"}, second  # new executors, same hosts: found
    assert "stores: 2 hits" in second

    # a host is lost while a run is inside epoch 3, and comes back with an empty disk
    ws.land(2, lines=3000, vocab=2000)
    epoch = ws.coordinator.inject().checkpoint_id
    lost = next(i for i in range(2) if any(hosts.address(i) in where for _, _, where in events.values()))
    out = driver.lose_a_host_inside(epoch, lost, "process", ws.job.name)
    driver.ok("finalize", ws.job.name)
    assert ws.committed() == ws.expected_latest(), out
    after = store_events(ws, epoch)
    assert "reload" in {e for e, _, _ in after.values()}, (after, out)  # its store, rebuilt elsewhere
    assert "verified" in cli_ok(ws, "verify", ws.job.name, spark=spark)
    summary(f"run 2 on new executors: {sorted(e for e, _, _ in events.values())}; host {hosts.address(lost)} "
            f"lost in epoch {epoch}: {sorted((e, ms) for e, ms, _ in after.values())} (event, reload ms); "
            f"sink = recount, verify exit 0")


@pytest.mark.heavy(seconds=90)
def test_a_join_and_a_window_lose_nothing_with_a_host(tmp_path, pg_url, hosts, spark, summary, monkeypatch) -> None:
    from coordinator.catalog.db import upgrade

    env = {"ABS_JOBS_DIR": JOBS, "VIEWS_SQL_URL": pg_url, "VIEWS_DELTA": str(tmp_path / "delta" / "views")}
    for k, v in env.items():  # the sinks' targets, as the job's declaration reads them here too
        monkeypatch.setenv(k, v)
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    upgrade(catalog)
    ws = make_workspace(tmp_path, catalog, get_job("views_by_country"), jobs_dir=JOBS)
    driver = Driver(hosts, ws, env)
    for batch in range(2):
        views_data.land(ws.input_dir, batch)
        epoch = ws.coordinator.inject().checkpoint_id
    # one run catches up on the two epochs and loses a host inside the second
    out = driver.lose_a_host_inside(epoch, 0, "process", ws.job.name)
    driver.ok("finalize", ws.job.name)
    sinks = {s.name: s.target(ws.settings.database_url).read() for s in ws.job.sinks
             if not s.name.endswith("_late")}
    assert views_data.check(ws.store, ws.job.name, ws.input_dir, sinks) == {
        "to_postgres": (0, 0), "to_delta": (0, 0)}, out
    assert sinks["to_delta"].num_rows > 10
    assert "verified" in cli_ok(ws, "verify", ws.job.name, spark=spark)
    restarted = out.count("starting over from the newest completed checkpoint")
    summary(f"views_by_country (join + window): host {hosts.address(0)} lost in epoch {epoch}, the run "
            f"started over {restarted} time(s) (its in-memory state went with the executor), "
            f"{sinks['to_delta'].num_rows} windows = reference, verify exit 0")
