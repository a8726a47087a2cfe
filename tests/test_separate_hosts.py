"""Keyed state on a cluster of hosts that share only the state root, the input and the catalog.

Two workers and the driver each on a host of their own (tests/separate_hosts.py: own address, own mount
namespace, a private tmpfs over each local directory), wordcount through the command line:

- the first run builds each subtask's store on the executor that runs it, from nothing;
- the next run, a new application with new executors, sends each store task back to the host that holds
  its store (``task_acks.store_location``): every store task is a hit;
- a worker is SIGKILLed with its executors while a run is in an epoch and comes back with an empty
  disk: the store task it held runs elsewhere and reloads its store from the checkpoint's files, the run
  goes on, and the sink equals an independent recount; ``absreplay verify`` agrees.
"""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from tests.helpers import ABSREPLAY, make_workspace
from tests.separate_hosts import separate_hosts

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.heavy(seconds=150)]


def store_events(ws, checkpoint_id: int) -> dict[int, tuple[str, int, str]]:
    """Subtask -> (hit or reload, reload ms, executor) of the count operator's acks of ``checkpoint_id``."""
    return {a.subtask: (a.store_event, a.store_load_ms, a.store_location)
            for a in ws.store.acks(ws.job.name, checkpoint_id) if a.operator == "count"}


def test_stores_stay_on_their_hosts_and_a_lost_host_costs_a_reload_never_data(tmp_path, pg_url, summary) -> None:
    ws = make_workspace(tmp_path, pg_url)
    with separate_hosts(tmp_path / "hosts", workers=2) as hosts:

        def absreplay(*args: str, faults: str = "") -> subprocess.Popen:
            env = {**os.environ, **ws.env(), **hosts.driver_env("driver"), "ABS_FAULTS": faults}
            return subprocess.Popen(hosts.command("driver", [ABSREPLAY, *args]), env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True)

        def ok(*args: str) -> str:
            out, _ = absreplay(*args).communicate(timeout=600)
            assert "ABS fault point" not in out
            return out

        def cycle(batch: int) -> str:
            ws.land(batch, lines=3000, vocab=2000)
            ws.coordinator.inject()
            out = ok("process", ws.job.name)
            ok("finalize", ws.job.name)
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
        ws.coordinator.inject()
        lost = next(i for i in range(2) if any(hosts.address(i) in where for _, _, where in events.values()))
        run = absreplay("process", ws.job.name, faults="epoch.compute@3=sleep:20")
        seen: list[str] = []
        reached = threading.Event()

        def pump() -> None:
            for line in run.stdout:
                seen.append(line)
                if "ABS fault point epoch.compute@3" in line:
                    reached.set()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        assert reached.wait(300), "".join(seen[-40:])
        hosts.kill(lost)
        hosts.start(lost)
        assert run.wait(600) == 0, "".join(seen[-60:])
        reader.join(30)
        out = "".join(seen)
        ok("finalize", ws.job.name)
        assert ws.committed() == ws.expected_latest(), out
        after = store_events(ws, 3)
        assert "reload" in {e for e, _, _ in after.values()}, (after, out)  # its store, rebuilt elsewhere
        assert "verified" in ok("verify", ws.job.name)
        summary(f"run 2 on new executors: {sorted(e for e, _, _ in events.values())}; host {hosts.address(lost)} "
                f"lost in epoch 3: {sorted((e, ms) for e, ms, _ in after.values())} (event, reload ms); "
                f"sink = recount, verify exit 0")
