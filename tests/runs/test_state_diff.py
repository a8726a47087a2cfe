"""Incremental snapshots of a lookup join's and a window's state (spark_jobs/state/frames/state_diff.py): the
page_views example, whose join keeps every user's row, one epoch a run (each run restores the last
checkpoint, as one Airflow DAG run a batch does). Its later snapshots are deltas against their base,
writing the epoch's changes, not the state; the chains give back exactly the state (Spark's restore,
`absreplay state`'s pyarrow reader and `verify`'s recomputation agree), and a rewind into a chain
replays to the same sinks. The job is the installed example, found through its entry point; its two sinks
(a SQL table and a Delta table) hold the same windows."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from coordinator.dataflow.discovery import get_job
from absreplay_examples import page_views_data
from coordinator.checkpoints.state_reader import state_at
from spark_jobs.run.runner import EpochRunner
from tests.helpers import cli_ok, make_workspace

pytestmark = [pytest.mark.spark]
JOIN, WINDOW = "with_country", "per_5_minutes"
EPOCHS = 6


def acks(ws, operator: str) -> dict[int, tuple[int | None, int]]:
    """checkpoint -> (the base its snapshot chains onto, rows written), summed over subtasks."""
    with ws.store.engine.connect() as c:
        rows = c.execute(text("SELECT checkpoint_id, max(base_checkpoint_id), sum(state_rows) FROM task_acks "
                              "WHERE job = 'page_views' AND operator = :op GROUP BY checkpoint_id"), {"op": operator})
        return {ck: (base, int(n)) for ck, base, n in rows}


def sink(ws) -> list[tuple]:
    """The windows (without the checkpoint that wrote each: a replay writes them under new ones)."""
    with ws.store.engine.connect() as c:
        return sorted(map(tuple, c.execute(text(
            "SELECT country, page, window_start, window_end, views FROM page_views_per_5_minutes")).all()))


@pytest.mark.heavy(seconds=95)
@pytest.mark.sink_unchecked("judged against the same job's own run before the rewind")
def test_join_and_window_deltas_follow_the_epoch_and_their_chains_restore_exactly(tmp_path, sqlite_url, spark,
                                                                                    monkeypatch) -> None:
    monkeypatch.setenv("PAGE_VIEWS_DELTA", str(tmp_path / "delta"))
    ws = make_workspace(tmp_path, sqlite_url, get_job("page_views"))
    for batch in range(EPOCHS):
        ws.epoch(spark, lambda d: page_views_data.land(d, batch, views=60, users=150))
    join = acks(ws, JOIN)
    assert join[1][0] is None  # the first snapshot is full
    deltas = [ck for ck, (base, _) in join.items() if base is not None]
    assert deltas and deltas[-1] == EPOCHS, join
    # a delta holds the epoch's changes: the users it landed and the views it joined or left waiting (the
    # retained checkpoints: the last 3)
    retained = range(EPOCHS - 2, EPOCHS + 1)
    state = {ck: state_at(ws.store, ws.job, ck, JOIN).num_rows for ck in retained}
    assert set(retained) <= set(deltas), join
    for ck in retained:
        assert join[ck][0] == ck - 1 and join[ck][1] < state[ck] / 2, (ck, join[ck], state[ck])
    assert state[EPOCHS] > EPOCHS * 150  # every user's row is kept
    # Spark's restore and the pyarrow reader give the same state from the chains
    runner = EpochRunner(spark, ws.store, ws.job, ws.settings.data_dir, ws.settings.state_uri)
    restored = runner.restore(EPOCHS).states
    for op in (JOIN, WINDOW):
        read = state_at(ws.store, ws.job, EPOCHS, op)
        spark_rows = sorted(tuple(r) for r in restored[op].select(*read.column_names).collect())
        assert spark_rows == sorted(zip(*[read.column(c).to_pylist() for c in read.column_names])), op
    # the stored chains equal the state recomputed from the sources
    assert f"checkpoint {EPOCHS} verified" in cli_ok(ws, "verify", "page_views", spark=spark)
    # a rewind into a chain: the epochs after it replay to the same sink
    before = sink(ws)
    assert len(before) > 10
    cli_ok(ws, "rewind", "page_views", "--to", str(EPOCHS - 2), spark=spark)
    assert sink(ws) == before
    # and the Delta sink holds the same windows as the SQL one
    columns = ["country", "page", "window_start", "window_end", "views"]
    rows = {s.name: sorted(tuple(r.values()) for r in s.target(sqlite_url).read().select(columns).to_pylist())
            for s in ws.job.sinks if not s.name.endswith("_late")}
    assert rows["to_postgres"] == rows["to_delta"] and len(rows["to_delta"]) == len(before)
