"""A job declared ``consistency="weak"`` (seed 003): sources never rewind, each stateful operator
restores its own latest snapshot, sinks are written directly. A failure loses records, and the
test counts exactly which; nothing is ever counted twice. Commands that need a consistent
checkpoint refuse the job by name."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from coordinator.dataflow.discovery import get_job
from absreplay_examples.recount import recount
from coordinator.checkpoints import weak
from coordinator.faults import ProcessCrash
from tests.helpers import JOBS_DIR, cli, cli_ok, crash, lost_and_duplicated, make_workspace, one_line_error

pytestmark = pytest.mark.spark
JOBS = str(JOBS_DIR)


def counts(ws) -> dict[str, int]:
    with ws.store.engine.connect() as c:
        return dict(c.execute(text("SELECT word, count FROM weak_wordcount_counts")).all())


@pytest.mark.sink_unchecked("weak consistency loses records on failure by design: this test counts them")
def test_a_failure_loses_the_epoch_being_read_and_duplicates_nothing(tmp_path, sqlite_url, spark, monkeypatch,
                                                                       summary) -> None:
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    ws = make_workspace(tmp_path, sqlite_url, get_job("weak_wordcount"), jobs_dir=JOBS)
    for batch in range(2):
        ws.land(batch)
        ws.coordinator.inject()
        out = cli_ok(ws, "process", "weak_wordcount", spark=spark)
        cli_ok(ws, "finalize", "weak_wordcount")
    assert "snapshots weak" in out and weak.LABEL in out
    # without failures nothing is lost: the same counts as a plain recount
    assert lost_and_duplicated(dict(recount(ws.input_dir, ws.store.cut(ws.job.name, 2))), counts(ws)) == (0, 0)
    assert weak.heads(ws.store, ws.job) == {"count": 2}
    assert [c.snapshot_mode for c in ws.store.checkpoints(ws.job.name)] == ["weak", "weak"]

    # epochs 3 and 4 pending; the process dies computing epoch 3, after its sources read it
    before = dict(recount(ws.input_dir, ws.store.cut(ws.job.name, 2)))
    ws.land(2)
    ws.coordinator.inject()
    cut_3 = ws.store.cut(ws.job.name, 3)
    ws.land(3)
    ws.coordinator.inject()
    crash(ws, spark, "epoch.compute@3", "process", "weak_wordcount")
    assert weak.consumed_through(ws.store, ws.job) == 3
    out = cli_ok(ws, "process", "weak_wordcount", spark=spark)
    # no rewind: the run resumes after epoch 3, with the operator's own snapshot (checkpoint 2)
    assert "restoring from checkpoint 3, 1 pending epoch(s) 4..4, snapshots weak" in out
    assert "count checkpoint 2" in out
    cli_ok(ws, "finalize", "weak_wordcount")

    everything = dict(recount(ws.input_dir, ws.store.cut(ws.job.name, 4)))
    epoch_3 = {w: n - before.get(w, 0) for w, n in dict(recount(ws.input_dir, cut_3)).items()
               if n - before.get(w, 0)}
    lost, duplicated = lost_and_duplicated(everything, counts(ws))
    summary(f"weak: lost={lost} duplicated={duplicated} of {sum(everything.values())} words; "
            f"epoch 3 held {sum(epoch_3.values())}")
    # exactly epoch 3's words are lost, none counted twice
    assert duplicated == 0
    assert lost == sum(epoch_3.values()) > 0
    assert weak.heads(ws.store, ws.job) == {"count": 4}

    # the job listing names its consistency; the exactly-once jobs beside it keep theirs
    listed = {j["name"]: j["consistency"] for j in json.loads(cli_ok(ws, "jobs", "--json"))["jobs"]}
    assert listed["weak_wordcount"] == "weak" and listed["wordcount"] == "exactly_once"
    assert weak.LABEL.split(":")[0] in cli_ok(ws, "jobs")
    # commands that need a consistent checkpoint refuse the job, by name, before Spark
    for args in (["recover", "weak_wordcount"], ["rewind", "weak_wordcount", "--to", "2"],
                 ["verify", "weak_wordcount"]):
        one_line_error(cli(ws, *args), "consistency='weak'")
    one_line_error(cli(ws, "process", "weak_wordcount", "--snapshot-mode", "sync"), "consistency='weak'")


@pytest.mark.sink_unchecked("judged here against a model of weak consistency (each level at its own head)")
def test_each_operator_restores_its_own_snapshot(tmp_path, sqlite_url, spark, monkeypatch) -> None:
    """synthetic's three levels, weak: the run dies after the first level acked checkpoint 3 and before
    the others did. The next run restores per_key at 3 and per_group and per_bucket at 2, from their
    files (the local stores are gone), and epoch 5 goes on from there: the sink is what that model
    says, exactly (no rewind, no alignment: the levels disagree about epochs 3 and 4 for good)."""
    import shutil
    from dataclasses import replace

    from absreplay_examples import synthetic_data
    from absreplay_examples.definitions import synthetic

    ws = make_workspace(tmp_path, sqlite_url, replace(synthetic(), consistency="weak"))
    for batch in range(5):
        synthetic_data.land(ws.input_dir, batch, 400, 300)
        if batch < 4:
            ws.coordinator.inject()
    ws.run_epochs(spark, max_epochs=2)
    monkeypatch.setenv("ABS_FAULTS", "snapshot.after_ack@3/1=crash")
    with pytest.raises(ProcessCrash):
        ws.run_epochs(spark)
    monkeypatch.delenv("ABS_FAULTS")
    assert weak.heads(ws.store, ws.job) == {"per_key": 3, "per_group": 2, "per_bucket": 2}
    assert weak.consumed_through(ws.store, ws.job) == 4
    # checkpoints 3 and 4 never complete: once they time out they fail, and garbage collection still
    # keeps per_key's files of checkpoint 3 (its head) and the chains of all heads
    later = datetime.now(UTC) + timedelta(days=2)
    assert ws.store.expire_timed_out(ws.job.name, now=later) == [3, 4]
    ws.coordinator.finalize()
    assert (Path(ws.settings.state_uri.removeprefix("file://")) / ws.job.name / "chk-3" / "per_key").is_dir()
    shutil.rmtree(ws.stores)
    ws.coordinator.inject()
    report = ws.run_epochs(spark)
    assert [e.checkpoint_id for e in report.epochs] == [5] and not report.failed
    assert weak.heads(ws.store, ws.job) == {"per_key": 5, "per_group": 5, "per_bucket": 5}

    cuts = [ws.store.cut(ws.job.name, n) for n in range(1, 6)]
    exact_through_4 = synthetic_data.reference(ws.input_dir, cuts[:4])
    model = synthetic_data.SyntheticState(per_key=synthetic_data.reference(ws.input_dir, cuts[:3]).per_key,
                                          per_group=synthetic_data.reference(ws.input_dir, cuts[:2]).per_group,
                                          per_bucket=synthetic_data.reference(ws.input_dir, cuts[:2]).per_bucket)
    before = dict(model.per_bucket)
    epoch_5 = synthetic_data.reference_records(ws.input_dir, cuts[3], cuts[4])
    model.epoch(epoch_5)
    # the sink: what the crashed run wrote through epoch 4 (every level at 4 then), and epoch 5's rows on top
    expected = dict(exact_through_4.per_bucket) | {k: v for k, v in model.per_bucket.items() if before.get(k) != v}
    with ws.store.engine.connect() as c:
        got = {k: tuple(v) for k, *v in c.execute(text("SELECT k3, total, updates, peak FROM synthetic_out"))}
    assert got == expected
    assert expected != synthetic_data.reference(ws.input_dir, cuts).per_bucket  # what exactly-once would hold
