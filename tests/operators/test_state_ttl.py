"""State TTL without Spark jobs: the declaration's checks, the state it implies, and how epochs are counted
(``coordinator.dataflow.ttl``); tests/operators/test_state_ttl_job.py runs it."""

from __future__ import annotations

import pytest

import absreplay.api as abs
from coordinator.dataflow.compile import output_schema, state_spec
from coordinator.catalog import epochs
from coordinator.dataflow import ttl
from coordinator.errors import UsageError
from coordinator.sinks.deletes import DELETE
from tests.helpers import make_workspace


def keyed(job_name: str = "ttl_job", **options) -> abs.KeyedStream:
    job = abs.Job(job_name, **options)
    return job.source("clicks", abs.json_lines({"user": str, "n": int})).key_by("user", str)


def keep(state, records):
    return records.select("user", "n")


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_a_ttl_that_is_not_a_positive_whole_number_of_epochs_is_refused_at_declaration(bad) -> None:
    with pytest.raises(ValueError, match=r"operator 'per_user': ttl_epochs=.* positive whole number"):
        keyed().aggregate("per_user", ttl_epochs=bad, n=abs.count())
    with pytest.raises(ValueError, match=r"operator 'last': ttl_epochs=.* positive whole number"):
        keyed().process("last", keep, state={"n": int}, ttl_epochs=bad)


@pytest.mark.parametrize(("options", "why"), [
    ({"ttl_ms": 0, "time": "ts"}, "ttl_ms=0 must be a positive whole number of milliseconds"),
    ({"ttl_ms": 2.5, "time": "ts"}, "ttl_ms=2.5 must be a positive"),
    ({"ttl_ms": 1000}, "ttl_ms needs the records' event-time column"),
    ({"time": "ts"}, "time='ts' is the event time of a state TTL: give ttl_ms too"),
    ({"ttl_ms": 1000, "time": "ts", "ttl_epochs": 2}, "give ttl_epochs or ttl_ms, not both"),
])
def test_an_event_time_ttl_needs_a_positive_ttl_ms_and_its_time_column(options, why) -> None:
    with pytest.raises(ValueError, match=f"operator 'recent': {why}"):
        keyed().aggregate("recent", n=abs.count(), **options)
    with pytest.raises(ValueError, match=f"operator 'recent': {why}"):
        keyed().process("recent", keep, state={"n": int}, **options)


def test_an_event_time_ttl_keeps_the_newest_event_time_hidden() -> None:
    users = keyed()
    users.aggregate("recent", ttl_ms=1000, time="ts", n=abs.count()).sink("out", abs.SqlTable("ttl_out"))
    node = users._job.node("recent")
    assert (node.ttl_ms, node.time, node.ttl_epochs) == (1000, "ts", None)
    assert [c for c, _ in state_spec(node).columns] == ["user", "n", ttl.EVENT_TIME, DELETE, "updated"]
    assert [c for c, _ in output_schema(node)] == ["user", "n"]


def test_a_ttl_operator_keeps_tombstones_and_emits_no_marker() -> None:
    users = keyed()
    users.aggregate("per_user", ttl_epochs=3, n=abs.count()).sink("out", abs.SqlTable("ttl_out"))
    users.aggregate("plain", n=abs.count()).sink("out2", abs.SqlTable("ttl_out2"))
    job = users._job
    with_ttl, without = job.node("per_user"), job.node("plain")
    assert with_ttl.ttl_epochs == 3 and without.ttl_epochs is None
    assert DELETE in [c for c, _ in state_spec(with_ttl).columns]
    assert DELETE not in [c for c, _ in state_spec(without).columns]
    assert [c for c, _ in output_schema(with_ttl)] == ["user", "n"]
    definition = job.definition()
    sink = next(s for s in definition.sinks if s.name == "out")
    assert list(sink.column_names) == ["user", "n"]


def test_an_aggregate_with_a_ttl_keeps_the_dataframe_state_not_the_local_stores() -> None:
    from spark_jobs.state.stores.provider import layout_of

    users = keyed()
    users.aggregate("per_user", ttl_epochs=2, n=abs.count()).sink("out", abs.SqlTable("ttl_out"))
    users.aggregate("plain", n=abs.count()).sink("out2", abs.SqlTable("ttl_out2"))
    users.aggregate("timed", ttl_ms=1000, time="n", n=abs.count()).sink("out3", abs.SqlTable("ttl_out3"))
    definition = users._job.definition()
    assert layout_of(users._job.node("per_user"), definition.state("per_user")) is None
    assert layout_of(users._job.node("timed"), definition.state("timed")) is None
    assert layout_of(users._job.node("plain"), definition.state("plain")) is not None


def test_a_weak_job_cannot_have_a_ttl() -> None:
    users = keyed(consistency="weak")
    users.aggregate("per_user", ttl_epochs=2, n=abs.count()).sink("out", abs.SqlTable("ttl_out"))
    with pytest.raises(ValueError, match="state TTL .*'per_user'.* exactly-once"):
        users._job.definition()


@pytest.mark.parametrize(("before", "ttl_epochs", "through"), [
    ([], 1, None),               # the first epoch: nothing was written before it
    ([1], 1, 1),                 # written by 1, not by 2: dropped at 2
    ([1], 2, None),
    ([1, 2, 3], 2, 2),           # at epoch 4, what 2 or earlier wrote is two epochs old
    ([1, 2, 7, 8], 3, 2),        # a rewind to 2 replayed 3 and 4 as 7 and 8: counted along the lineage
    ([1, 2, 7, 8], 4, 1),
])
def test_a_key_expires_when_its_last_write_is_ttl_epochs_back_along_the_lineage(before, ttl_epochs, through) -> None:
    assert ttl.expire_through(before, ttl_epochs) == through


def test_the_lineage_follows_epoch_starts_not_checkpoint_ids(tmp_path, sqlite_url: str) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    for batch in range(5):
        ws.land(batch, lines=20)
        ws.coordinator.inject()
    # a first run took 1..4; a rewind to 2 replays epoch 3 as checkpoint 5
    ws.store.begin_attempt(ws.job.name, [1, 2, 3, 4, 5], "async", epoch_starts={1: 0, 2: 1, 3: 2, 4: 3, 5: 2})
    assert epochs.lineage(ws.store, ws.job.name, 4) == [1, 2, 3, 4]
    assert epochs.lineage(ws.store, ws.job.name, 5) == [1, 2, 5]
    assert epochs.lineage(ws.store, ws.job.name, None) == [] == epochs.lineage(ws.store, ws.job.name, 0)


def test_a_lineage_without_epoch_starts_is_bad_input(tmp_path, sqlite_url: str) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    for batch in range(2):
        ws.land(batch, lines=20)
        ws.coordinator.inject()
    ws.store.begin_attempt(ws.job.name, [2], "async", epoch_starts={2: 1})  # 1 records none
    with pytest.raises(UsageError, match="checkpoint 1 .* does not record where its epoch began"):
        epochs.lineage(ws.store, ws.job.name, 2)
