"""`absreplay state` and `absreplay diff` against checkpoints of real runs, checked against an
independent recount of the sources (issue 12); the Spark entry gives the same rows."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

from absreplay_examples.sample_data import land_segment
from absreplay_examples.union_find import labels_at
from coordinator.checkpoints import back_edge_logs
from absreplay_examples.definitions import connected_components
from tests.helpers import cli, cli_ok, make_workspace

pytestmark = pytest.mark.spark


def json_rows(text: str) -> list[dict]:
    """``--format json``: one document, the array of rows."""
    rows = json.loads(text)
    assert isinstance(rows, list)
    return rows


@pytest.fixture
def wordcount_ws(tmp_path, sqlite_url, spark):
    """Four cycles: a full snapshot, then deltas (the state at 4 comes from a chain of files)."""
    ws = make_workspace(tmp_path, sqlite_url)
    for batch, lines in enumerate((2000, 20, 20, 20)):  # small epochs touch few keys: deltas
        ws.land(batch, lines=lines)
        ws.coordinator.inject()
        ws.run_epochs(spark)
        ws.coordinator.finalize()
    return ws


def test_state_at_every_checkpoint_is_the_recount_of_its_cut(wordcount_ws) -> None:
    ws = wordcount_ws
    assert any(a.base_checkpoint_id for a in ws.store.acks("wordcount", 4))  # 4 is a delta: a chain is read
    assert [c.status for c in ws.store.checkpoints("wordcount")][1:] == ["COMPLETED"] * 3
    for checkpoint in (2, 3, 4):
        rows = json_rows(cli_ok(ws, "state", "wordcount", "--checkpoint", str(checkpoint), "--format", "json"))
        assert {r["word"]: r["count"] for r in rows} == ws.expected_at(checkpoint)
        assert all(1 <= r["updated"] <= checkpoint for r in rows)


def test_one_key_at_a_checkpoint_in_every_format(wordcount_ws, tmp_path) -> None:
    ws = wordcount_ws
    expected = ws.expected_at(2)["w1"]
    (row,) = json_rows(cli_ok(ws, "state", "wordcount", "--checkpoint", "2", "--key", "w1", "--format", "json"))
    assert row["word"] == "w1" and row["count"] == expected
    table = cli_ok(ws, "state", "wordcount", "--checkpoint", "2", "--key", "w1")
    assert "(1 rows)" in table and f"│ w1   │ {expected:>5} │" in table
    out = tmp_path / "state.parquet"
    cli_ok(ws, "state", "wordcount", "--checkpoint", "2", "--format", "parquet", "--out", str(out))
    t = pq.read_table(out)
    assert dict(zip(t.column("word").to_pylist(), t.column("count").to_pylist(), strict=True)) == ws.expected_at(2)
    assert "is not in the state" in cli_ok(ws, "state", "wordcount", "--checkpoint", "2", "--key", "no-such-word")


def test_diff_names_added_and_changed_keys(wordcount_ws) -> None:
    ws = wordcount_ws
    old, new = ws.expected_at(2), ws.expected_at(4)
    rows = json_rows(cli_ok(ws, "diff", "wordcount", "--from", "2", "--to", "4", "--format", "json"))
    assert rows
    added = {r["word"]: r["count"] for r in rows if r["change"] == "added"}
    changed = {r["word"]: (r["count_from"], r["count_to"]) for r in rows if r["change"] == "changed"}
    assert added == {w: n for w, n in new.items() if w not in old}
    assert changed == {w: (old[w], n) for w, n in new.items() if w in old and old[w] != n}
    assert not [r for r in rows if r["change"] == "removed"]  # counts only grow
    summary = cli_ok(ws, "diff", "wordcount", "--from", "2", "--to", "4")
    assert f"{len(added):,} key(s) added, 0 removed, {len(changed):,} changed" in summary


def test_the_spark_entry_returns_the_same_verified_rows(wordcount_ws, spark) -> None:
    from spark_jobs.state_frame import state_dataframe

    ws = wordcount_ws
    df = state_dataframe(spark, "wordcount", 4, settings=ws.settings)
    assert {r["word"]: r["count"] for r in df.collect()} == ws.expected_at(4)


@pytest.mark.parametrize(("args", "says"), [
    (("--checkpoint", "99"), "checkpoint 99 of job 'wordcount' does not exist"),
    (("--checkpoint", "1"), "checkpoint 1 of job 'wordcount' is SUBSUMED: only retained (completed) checkpoints"),
    (("--checkpoint", "2", "--format", "parquet"), "--format parquet writes a file"),
    (("--checkpoint", "2", "--format", "csv"), "--format must be one of table, json, jsonl, parquet"),
    (("--checkpoint", "2", "--operator", "tokenize"), "operator 'tokenize' of job 'wordcount' keeps no keyed state"),
    (("--checkpoint", "2", "--operator", "nope"), "job 'wordcount' has no operator 'nope'"),
])
def test_bad_requests_exit_2_with_one_line(wordcount_ws, args, says) -> None:
    r = cli(wordcount_ws, "state", "wordcount", *args)
    assert r.code == 2 and says in r.err and len(r.err.strip().splitlines()) == 1, r.err


@pytest.mark.heavy(seconds=40)
def test_connected_components_state_and_diff_with_list_columns(tmp_path, sqlite_url, spark) -> None:
    ws = make_workspace(tmp_path, sqlite_url, connected_components())
    with ws.store.engine.begin() as c:  # keep checkpoint 1 (before the merge) for the diff
        c.execute(text("UPDATE jobs SET retained = 20"))
    land_segment(ws.input_dir / "p0", "seg-000001.txt", ["1 2", "2 3", "7 8"])
    ws.coordinator.inject()
    ws.run_epochs(spark)
    land_segment(ws.input_dir / "p0", "seg-000002.txt", ["3 7", "9 10"])
    ws.coordinator.inject()
    for _ in range(4):  # the new edge merges two components; empty epochs let the loop drain
        ws.run_epochs(spark)
        ws.coordinator.finalize()
        latest = ws.store.latest_completed("connected_components").checkpoint_id
        if not sum(log.records for log in back_edge_logs.of_checkpoint(ws.store.sessions, ws.job.name, latest)):
            break
        ws.coordinator.inject()
    rows = json_rows(cli_ok(ws, "state", "connected_components", "--checkpoint", str(latest), "--format", "json"))
    assert {r["vertex"]: r["component"] for r in rows} == labels_at(ws.input_dir, ws.store.cut(
        "connected_components", latest))
    assert {r["vertex"]: sorted(r["neighbors"]) for r in rows}[3] == [2, 7]
    changes = json_rows(cli_ok(ws, "diff", "connected_components", "--from", "1", "--to", str(latest),
                               "--format", "json"))
    changed = {r["vertex"]: (r["component_from"], r["component_to"]) for r in changes if r["change"] == "changed"}
    assert changed[7] == (7, 1) and changed[8] == (7, 1)  # relabelled by the merge
    assert {r["vertex"] for r in changes if r["change"] == "added"} == {9, 10}
