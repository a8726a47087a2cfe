"""The epochs DAG's ``process_epochs`` operator (``absreplay.airflow.processing_run``) maps Spark's classes
from the command line's archive, or dumps it on its first run and puts it in place once that run succeeded.

spark-submit itself is replaced by a stand-in that reads the command line the provider's hook built and
writes the dump the driver JVM would: that a driver maps and dumps with these options is
tests/cli/test_jvm_archive.py's to show, through the command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

from absreplay.commands.airflow_demo import isolate_airflow_home

isolate_airflow_home()  # before airflow is imported

import pytest  # noqa: E402
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook  # noqa: E402
from airflow.sdk.exceptions import AirflowException  # noqa: E402

from absreplay.airflow import orchestration  # noqa: E402
from absreplay.airflow.processing_run import ProcessingRun  # noqa: E402
from absreplay.commands import jvm_archive  # noqa: E402
from coordinator.settings import Settings  # noqa: E402
from tests.conftest import JVM_OPTIONS  # noqa: E402

OWN = "-Dthe.users.own=1"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(jvm_archive.ARCHIVE_ENV, str(tmp_path / "jvm"))
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", JVM_OPTIONS)  # not the suite's archive, which a run would leave alone
    monkeypatch.setattr(orchestration, "airflow_settings", lambda: Settings.from_env({"ABS_HOME": str(tmp_path)}))
    return tmp_path / "jvm"


def run(monkeypatch: pytest.MonkeyPatch, fails: bool = False, deploy_mode: str | None = None) -> str:
    """One ``execute`` of the operator; the driver's Java options on the command line it submitted."""
    seen: list[str] = []

    def submit(hook: SparkSubmitHook, application: str = "", **_kwargs) -> None:
        command = hook._build_spark_submit_command(application)
        options = next((arg.split("=", 1)[1] for arg in command if arg.startswith("spark.driver.extraJavaOptions=")), "")
        seen.append(options)
        if dump := re.search(r"-XX:ArchiveClassesAtExit=(\S+)", options):
            Path(dump.group(1)).write_bytes(b"the driver's classes")  # as the JVM does when it exits
        if fails:
            raise AirflowException("spark-submit failed")

    monkeypatch.setattr(SparkSubmitHook, "submit", submit)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(
        {"conn_type": "spark", "host": "local[2]", "extra": {"deploy-mode": deploy_mode} if deploy_mode else {}}))
    operator = ProcessingRun(job_name="wordcount", task_id="process_epochs", conn_id="spark_default",
                             application="process.py", conf={"spark.driver.extraJavaOptions": OWN})
    try:
        operator.execute({})
    except AirflowException:
        assert fails
    return seen[0]


def test_the_first_run_dumps_the_archive_and_puts_it_in_place_the_next_maps_it(folder, monkeypatch) -> None:
    path = jvm_archive.wanted(orchestration.airflow_settings())
    first = run(monkeypatch)
    assert first.startswith(OWN) and "-XX:ArchiveClassesAtExit=" in first
    assert sorted(folder.iterdir()) == [path]
    second = run(monkeypatch)
    assert second == f"{OWN} -XX:SharedArchiveFile={path} {jvm_archive.QUIET}"
    assert sorted(folder.iterdir()) == [path]


def test_a_failed_run_leaves_no_archive_and_no_dump(folder, monkeypatch) -> None:
    assert "-XX:ArchiveClassesAtExit=" in run(monkeypatch, fails=True)
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("deploy_mode", ["cluster", "off"])
def test_no_archive_when_the_driver_runs_on_a_cluster_host_or_it_is_off(deploy_mode, folder, monkeypatch) -> None:
    if deploy_mode == "off":
        monkeypatch.setenv(jvm_archive.ARCHIVE_ENV, "off")
    assert run(monkeypatch, deploy_mode=None if deploy_mode == "off" else deploy_mode) == OWN
    assert not folder.exists()
