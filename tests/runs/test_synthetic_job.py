"""The synthetic example job (absreplay_examples/synthetic.py): three keyed aggregates in a row, each
fed by the one before's changed keys. Run and verified through the command line; its sink is checked
against absreplay_examples.synthetic_data.reference, a plain-Python recomputation replayed epoch by
epoch along the checkpoints' cuts, and its chain of aggregates (one Spark job an epoch) against the same
runs with one job per aggregate."""

from __future__ import annotations

from unittest import mock

import pytest
from sqlalchemy import select, text

from absreplay_examples import synthetic_data
from absreplay_examples.definitions import synthetic
from coordinator.catalog.db import upgrade
from coordinator.catalog.models import SinkWatermark
from tests.helpers import cli, cli_ok, make_workspace
from tests.sink_check import epoch_cuts

pytestmark = pytest.mark.spark

BATCHES = 3
RECORDS = 1_000
KEYS = 2_000  # 200 groups, 20 buckets; a key is drawn about once every four epochs


def sink_rows(ws) -> dict[int, tuple[int, int, int]]:
    with ws.store.engine.connect() as c:
        return {k: (t, u, p) for k, t, u, p in c.execute(text("SELECT k3, total, updates, peak FROM synthetic_out"))}


def sink_marks(ws) -> tuple[int, dict[str, int]]:
    """(the checkpoint of the sink's high-water marks, the marks)."""
    with ws.store.sessions() as s:
        rows = s.execute(select(SinkWatermark.checkpoint_id, SinkWatermark.partition, SinkWatermark.offset).where(
            SinkWatermark.job == "synthetic", SinkWatermark.sink == "sink")).all()
    [at] = {c for c, _, _ in rows}
    return at, {p: o for _, p, o in rows}


def acks(ws) -> list[tuple]:
    """Every keyed aggregate's acks: checkpoint, operator, subtask, rows and checksum, in order."""
    with ws.store.engine.connect() as c:
        return c.execute(text("SELECT checkpoint_id, operator, subtask, state_rows, checksum FROM task_acks WHERE "
                              "operator LIKE 'per_%' ORDER BY checkpoint_id, operator, subtask")).all()


def spark_jobs_so_far(spark) -> int:
    """Spark jobs the session has submitted, as its scheduler numbers them when they are submitted (the status
    tracker learns of a job from the listener bus, later: counted from it, a run's jobs could fall in the next)."""
    return spark.sparkContext._jsc.sc().dagScheduler().numTotalJobs()


def test_run_verify_and_the_sink_equals_a_plain_recomputation(tmp_path, sqlite_url, spark, monkeypatch) -> None:
    """Also ``stores.apply.chainable``: per_key's and per_group's applies run inside per_bucket's job, their
    changes handed on without being read back from their delta files, their metrics read from the plan they ran
    in. Each epoch starts two Spark jobs fewer than a second workspace's, run with one job per aggregate, and
    every ack (rows and checksum of every aggregate's subtask) and the sink are the same."""
    from spark_jobs.state.stores import apply as store_apply

    ws = make_workspace(tmp_path, sqlite_url, synthetic())
    separate_url = f"sqlite:///{tmp_path / 'separate.db'}"
    upgrade(separate_url)
    separate = make_workspace(tmp_path / "separate", separate_url, synthetic())
    jobs = {"chained": [], "separate": []}
    for batch in range(BATCHES):
        for name, w in (("chained", ws), ("separate", separate)):
            assert synthetic_data.land(w.input_dir, batch, RECORDS, KEYS) == RECORDS
            with monkeypatch.context() as m:
                if name == "separate":
                    m.setattr(store_apply, "chainable", lambda *a: False)
                before = spark_jobs_so_far(spark)
                cli_ok(w, "run", "synthetic", spark=spark)
                jobs[name].append(spark_jobs_so_far(spark) - before)
    assert [s - c for c, s in zip(jobs["chained"], jobs["separate"], strict=True)] == [2] * BATCHES, jobs
    assert acks(ws) == acks(separate) and len(acks(ws)) == 3 * 2 * BATCHES
    assert sink_rows(ws) == sink_rows(separate)

    out = cli_ok(ws, "verify", "synthetic", spark=spark)
    assert f"checkpoint {BATCHES} verified" in out and f"in {BATCHES} epoch(s)" in out, out
    # why verify replays the epochs of a keyed operator fed by another's changes: one epoch over every
    # record (what it recomputes for a job without such a chain) differs from the stored state
    with mock.patch("spark_jobs.verify.fed_by_keyed", return_value=False):
        r = cli(ws, "verify", "synthetic", spark=spark)
    assert r.code == 1 and "DIFFERS" in r.out and "per_group#" in r.out, r.out + r.err

    at, marks = sink_marks(ws)
    assert at == BATCHES and sum(marks.values()) == BATCHES * RECORDS
    cuts = epoch_cuts(ws.store, "synthetic", at)
    assert len(cuts) == BATCHES and cuts[-1] == marks
    expected = synthetic_data.reference(ws.input_dir, cuts)
    got = sink_rows(ws)
    assert len(got) == KEYS // 100
    assert got == expected.per_bucket
    # every group and bucket reached; the plain recomputation, too, depends on where epochs end
    assert len(expected.per_group) == KEYS // 10
    assert synthetic_data.reference(ws.input_dir, [marks]).per_bucket != got
