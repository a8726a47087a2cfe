"""A real ``airflow standalone`` on loopback for tests, and a small client of its REST API v2.

``standalone(...)`` starts it with the project's DAGs (and, through the
``airflow.plugins`` entry point, the ABS Replay view) against a test's catalog,
waits until every component is healthy and the DAGs are listed, and stops its
whole process group afterwards. Without ``users`` everyone is admin
(``SIMPLE_AUTH_MANAGER_ALL_ADMINS``); with ``users`` (name -> (role,
password)) the simple auth manager knows exactly those, from a passwords file
the test writes, and the client signs in as the first one.

Airflow is sized for the test machine (2 cores, two pytest workers): the LocalExecutor forks one
worker process per task slot (``[core] parallelism``) as the scheduler starts, and Airflow's
default of 32 took about 8 GiB; a test's DAG runs need no more than ``PARALLELISM`` at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from absreplay.commands.airflow_demo import airflow_env, airflow_executable
from tests.helpers import Workspace, free_port, stop_process_group

READY_TIMEOUT_S = 240
RUN_TIMEOUT_S = 240
#: task slots, and so LocalExecutor worker processes, of each test Airflow
PARALLELISM = 2
#: the title the LocalExecutor gives its worker processes (airflow.executors.local_executor)
EXECUTOR_WORKER_TITLE = b"airflow worker -- LocalExecutor"


@dataclass(frozen=True)
class Airflow:
    base: str
    log: Path
    token: str | None = None
    dag: str = "abs_wordcount_recover"
    #: the session of ``airflow standalone`` (its process id): every process of this Airflow is in it
    session: int | None = None

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(f"{self.base}/api/v2{path}", data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.load(resp)
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                return exc.code, json.loads(text or b"null")
            except ValueError:  # a plain-text error page ("Internal Server Error")
                return exc.code, text.decode(errors="replace")

    def login(self, username: str, password: str) -> Airflow:
        """This client signed in as ``username`` (the simple auth manager's token endpoint)."""
        req = urllib.request.Request(f"{self.base}/auth/token", method="POST",
                                     data=json.dumps({"username": username, "password": password}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return replace(self, token=json.load(resp)["access_token"])

    def get(self, path: str) -> Any:
        """A read; asked again (up to 5 times) on a 5xx or no answer in 30 s: standalone keeps its metadata in
        SQLite, and under a loaded machine a read can meet the scheduler's write lock ("Internal Server Error",
        seen once in CI) or wait behind it (a timeout, seen once with a Spark test beside CI's three workers)."""
        for attempt in range(5):
            try:
                status, body = self.call("GET", path)
            except (TimeoutError, urllib.error.URLError) as exc:
                if attempt == 4:
                    raise
                status, body = 599, repr(exc)
            if status < 500:
                break
            time.sleep(1)
        assert status == 200, (path, status, body)
        return body

    def trigger(self, conf: dict[str, Any]) -> tuple[int, Any]:
        return self.call("POST", f"/dags/{self.dag}/dagRuns", {"logical_date": None, "conf": conf})

    def wait_for_run(self, run_id: str) -> str:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            state = self.get(f"/dags/{self.dag}/dagRuns/{run_id}")["state"]
            if state in ("success", "failed"):
                return state
            time.sleep(2)
        pytest.fail(f"run {run_id} did not finish in {RUN_TIMEOUT_S}s:\n{self.tail()}")

    def task_instances(self, run_id: str) -> dict[str, dict]:
        body = self.get(f"/dags/{self.dag}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti for ti in body["task_instances"]}

    def task_log(self, run_id: str, task_id: str, try_number: int) -> str:
        body = self.get(f"/dags/{self.dag}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
                        "?full_content=true")
        return json.dumps(body["content"])

    def executor_workers(self) -> int:
        """How many LocalExecutor worker processes this Airflow runs now."""
        count = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                session = int(stat.read_text().rsplit(")", 1)[1].split()[3])
                count += session == self.session and (stat.parent / "cmdline").read_bytes().startswith(
                    EXECUTOR_WORKER_TITLE)
            except (OSError, IndexError, ValueError):
                continue  # a process that ended meanwhile
        return count

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])


def _auth_env(home: Path, users: dict[str, tuple[str, str]] | None) -> dict[str, str]:
    if users is None:
        return {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"}
    passwords = home / "simple_auth_manager_passwords.json"
    passwords.write_text(json.dumps({name: password for name, (_, password) in users.items()}))
    return {
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{n}:{role}" for n, (role, _) in users.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
    }


def _bundles_env(more_dags: Path | None) -> dict[str, str]:
    if more_dags is None:
        return {}
    local = "airflow.dag_processing.bundles.local.LocalDagBundle"
    return {"AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps([
        {"name": "dags-folder", "classpath": local, "kwargs": {}},
        {"name": "more-dags", "classpath": local, "kwargs": {"path": str(more_dags)}},
    ])}


@contextlib.contextmanager
def standalone(tmp_path: Path, catalog: Workspace, pg_url: str,
               users: dict[str, tuple[str, str]] | None = None, more_dags: Path | None = None,
               more_env: dict[str, str] | None = None) -> Iterator[Airflow]:
    """``more_dags``: a folder of DAG files parsed beside the project's (its own DAG bundle);
    ``more_env``: more environment for every component (the DAG processor's parse included)."""
    port = free_port()
    home = tmp_path / "airflow"
    home.mkdir()
    env = {
        **os.environ,
        **airflow_env(home, "local[2]"),
        **{k: v for k, v in catalog.settings.as_env().items() if k != "ABS_DATABASE_URL"},
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__PARALLELISM": str(PARALLELISM),
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(PARALLELISM),
        **_auth_env(home, users),
        "AIRFLOW_VAR_ABS_DATABASE_URL": pg_url,
        **_bundles_env(more_dags),
        **(more_env or {}),
    }
    log = tmp_path / "airflow-standalone.log"
    with log.open("w") as fh:
        proc = subprocess.Popen([airflow_executable(), "standalone"], env=env, cwd=tmp_path, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
    api = Airflow(f"http://127.0.0.1:{port}", log, session=proc.pid)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                health = api.call("GET", "/monitor/health")[1]
                if health and all(health[c]["status"] == "healthy"
                                  for c in ("metadatabase", "scheduler", "dag_processor", "triggerer")):
                    if users and api.token is None:
                        name, (_, password) = next(iter(users.items()))
                        api = api.login(name, password)
                    if api.get("/dags?dag_id_pattern=abs_")["total_entries"] >= 4:
                        break
            except (OSError, ValueError, KeyError, TypeError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"airflow standalone did not become ready:\n{api.tail()}")
            time.sleep(2)
        yield api
    finally:
        # nothing of this Airflow is kept: its components get 5 s to stop before the SIGKILL
        stop_process_group(proc, grace_s=5)
