"""Jobs whose input and state are on an S3 server (s3proxy, ``tests/servers/s3.py``), configured as a cluster's
administrator configures Spark: a ``SPARK_CONF_DIR`` whose ``spark-defaults.conf`` names the S3A jars and
settings, which the coordinator reads too. No local folder holds a segment or a snapshot: the input
(``ABS_DATA_DIR=s3a://...``) is landed object by object, under final names, and every command goes
through the command line (spark-submit), as a user runs them.

- wordcount: three epochs, ``process`` SIGKILLed (with its Spark JVM) inside the third, then ``recover``: the sink equals an independent recount read back from the server,
  ``absreplay verify`` exits 0; an object rewritten after its barrier is then refused by the run of its
  epoch, naming it, with nothing read; put back, the epoch runs;
- a job with a join and an event-time window (tests/jobs/views_by_country.py), its Delta sink on the server
  too, the same kill and recovery: both sinks equal a plain-Python reference, ``verify`` exits 0.
"""

from __future__ import annotations

import pytest

from coordinator.dataflow.discovery import get_job
from coordinator.catalog.db import upgrade
from tests import views_data
from tests.helpers import JOBS_DIR, make_workspace
from tests.servers.remote_runs import command, killed_in_third_epoch, ok
from tests.servers.s3 import S3Server, s3_server

pytestmark = [pytest.mark.spark]


@pytest.fixture
def s3(tmp_path, monkeypatch) -> S3Server:
    with s3_server(tmp_path / "s3") as server:
        # what every command of the test, and the test's own reads, take their S3A settings from
        monkeypatch.setenv("SPARK_CONF_DIR", str(server.spark_conf_dir(tmp_path / "spark-conf")))
        yield server


def on_s3(s3: S3Server) -> dict[str, str]:
    bucket = s3.bucket("abs")
    return {"ABS_DATA_DIR": f"{bucket}/input", "ABS_STATE_URI": f"{bucket}/state"}


def objects(s3: S3Server, prefix: str) -> list[str]:
    import pyarrow.fs as pafs

    return sorted(f.path for f in s3.filesystem().get_file_info(pafs.FileSelector(prefix, recursive=True))
                  if f.type == pafs.FileType.File)


@pytest.mark.heavy(seconds=150)
def test_wordcount_on_s3_survives_a_kill_and_refuses_a_rewritten_object(tmp_path, s3, summary) -> None:
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    upgrade(catalog)
    ws = make_workspace(tmp_path, catalog, env=on_s3(s3))
    assert str(ws.input_dir) == "s3a://abs/input/wordcount/input"
    killed_in_third_epoch(ws, lambda batch: ws.land(batch, lines=600))
    recovered = ok(ws, "recover", ws.job.name)
    assert ws.store.latest_completed(ws.job.name).checkpoint_id == 3, recovered
    assert ws.committed() == ws.expected_latest()
    assert "checkpoint 3 verified" in ok(ws, "verify", ws.job.name)
    state = objects(s3, "abs/state/wordcount")
    assert any(name.endswith("/_manifest.json") for name in state), state

    # an object rewritten after its barrier, before its epoch ran: the run names it and reads nothing
    ws.land(3, lines=600)
    ws.coordinator.inject()
    segment = ws.input_dir / "p0" / "seg-000003.txt"
    landed = segment.read_bytes()
    segment.write_bytes(landed.replace(b" ", b"_", 3))
    code, refused = command(ws, "process", ws.job.name)
    assert code == 2, refused[-3000:]
    assert f"segment {segment} of epoch 4 changed after inject" in refused
    assert ws.store.latest_completed(ws.job.name).checkpoint_id == 3
    # put back as it was (the registered content): the epoch runs
    segment.write_bytes(landed)
    ok(ws, "process", ws.job.name)
    ok(ws, "finalize", ws.job.name)
    assert ws.committed() == ws.expected_latest() == ws.expected_at(4)
    error = next(line for line in refused.splitlines() if line.startswith("error:"))
    summary(f"wordcount on S3: process SIGKILLed inside epoch 3, recovered to checkpoint 3; sink = recount, "
            f"verify exit 0; {len(state)} state objects; a rewritten object refused: {error[:160]}")


@pytest.mark.postgres
@pytest.mark.heavy(seconds=150)
def test_a_join_and_a_window_on_s3_survive_a_kill(tmp_path, s3, pg_url, summary, monkeypatch) -> None:
    jobs = str(JOBS_DIR)
    # the Delta sink on the server too: delta-rs takes its endpoint and keys from the same S3A settings
    env = {"ABS_JOBS_DIR": jobs, "VIEWS_SQL_URL": pg_url, "VIEWS_DELTA": "s3a://abs/delta/views"}
    for k, v in env.items():  # the sinks' targets, as the job's declaration reads them here too
        monkeypatch.setenv(k, v)
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    upgrade(catalog)
    ws = make_workspace(tmp_path, catalog, get_job("views_by_country"), jobs_dir=jobs, env=on_s3(s3))
    killed_in_third_epoch(ws, lambda batch: views_data.land(ws.input_dir, batch))
    out = ok(ws, "recover", ws.job.name)
    assert ws.store.latest_completed(ws.job.name).checkpoint_id == 3, out
    sinks = {s.name: s.target(ws.settings.database_url).read() for s in ws.job.sinks
             if not s.name.endswith("_late")}
    assert views_data.check(ws.store, ws.job.name, ws.input_dir, sinks) == {
        "to_postgres": (0, 0), "to_delta": (0, 0)}, out
    assert sinks["to_delta"].num_rows > 10
    assert any(name.endswith(".json") for name in objects(s3, "abs/delta/views/_delta_log"))
    assert "checkpoint 3 verified" in ok(ws, "verify", ws.job.name)
    summary(f"views_by_country on S3: process SIGKILLed inside epoch 3, recovered; {sinks['to_delta'].num_rows} "
            f"windows = reference, verify exit 0")
