"""Changing parallelism between runs: state is redistributed by key groups, results stay exact.

Runs are the command line as typed, in this process on the shared session (tests.helpers.cli);
the reference is an independent recount (absreplay_examples.recount) or union-find (absreplay_examples.union_find)
of the segment files, never the job's own code.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from coordinator.checkpoints import recovery
from absreplay_examples.definitions import connected_components
from tests.helpers import cli, cli_ok, lost_and_duplicated, make_workspace
from tests.runs.test_connected_components import JOB as CC, back_edge_records, committed_labels, expected, land_graph

WORDCOUNT = "wordcount"
WORDCOUNT_OPERATORS = ("source", "tokenize", "count", "sink")
CC_OPERATORS = ("source", "parse", "labels", "propagate", "feedback", "sink")


def land_and_inject(ws, batch: int, lines: int = 3) -> int:
    ws.land(batch, lines=lines)
    return ws.coordinator.inject().checkpoint_id


def assert_exact(ws) -> None:
    latest = ws.store.latest_completed(WORDCOUNT).checkpoint_id
    expected_counts = ws.expected_at(latest)
    assert lost_and_duplicated(expected_counts, ws.committed()) == (0, 0)
    assert ws.committed() == expected_counts


def assert_taken_at(ws, checkpoint_ids: list[int], p: int, operators: tuple[str, ...] = WORDCOUNT_OPERATORS) -> None:
    """Completed at parallelism p: every task of every operator's p subtasks acked, and counted."""
    job = ws.job.name
    for cid in checkpoint_ids:
        ck = ws.store.checkpoint(job, cid)
        acked = {(a.operator, a.subtask) for a in ws.store.acks(job, cid)}
        assert acked == {(op, i) for op in operators for i in range(p)}, cid
        assert ck.status in ("COMPLETED", "SUBSUMED"), cid
        assert (ck.parallelism, ck.total_tasks) == (p, len(operators) * p), cid
    row = ws.store.job(job)
    assert row.total_tasks == len(operators) * p
    assert {o["parallelism"] for o in json.loads(row.execution_graph)["operators"]} == {p}


def store_layouts(ws) -> list[str]:
    """The local stores' folders of the count operator: one per layout (parallelism, key groups, shape)."""
    return sorted(p.name.split("-")[0] for p in ws.stores.glob("count/*") if p.is_dir())


def state_bases(ws, checkpoint_id: int) -> dict[int, int | None]:
    """Subtask -> base checkpoint of its snapshot (None: full) of the keyed operator."""
    return {a.subtask: a.base_checkpoint_id for a in ws.store.acks(ws.job.name, checkpoint_id)
            if a.operator == ws.job.state_operator}


def test_the_key_group_rule_is_flinks_and_every_subtask_holds_a_contiguous_range(spark) -> None:
    from pyspark.sql import functions as F

    from spark_jobs.state.keyed_state import subtask_of

    keys = spark.range(2000).select(F.concat(F.lit("w"), F.col("id").cast("string")).alias("k"))
    sizes = (1, 2, 3, 4, 7, 128)
    rows = keys.select(F.hash("k").alias("h"), *[subtask_of("k", p, 128).alias(f"p{p}") for p in sizes]).collect()
    for p in sizes:
        owner: dict[int, int] = {}
        for r in rows:
            group = r["h"] % 128  # Python's % is Spark's pmod for a positive divisor
            assert r[f"p{p}"] == group * p // 128
            assert owner.setdefault(group, r[f"p{p}"]) == r[f"p{p}"]  # a key group never splits
        # subtask i owns the groups [ceil(i * 128 / p), ceil((i + 1) * 128 / p)): contiguous and ordered
        assert [owner[g] for g in sorted(owner)] == sorted(owner[g] for g in owner)
        assert set(owner.values()) == set(range(p))


def test_wordcount_changes_parallelism_between_runs_with_exact_results(tmp_path, pg_url, spark) -> None:
    ws = make_workspace(tmp_path, pg_url)
    # parallelism 2 (the default): a big first epoch, then small ones whose snapshots are deltas
    first = land_and_inject(ws, 0, lines=200)
    ids = [first, land_and_inject(ws, 1), land_and_inject(ws, 2)]
    cli_ok(ws, "process", WORDCOUNT, spark=spark)
    cli_ok(ws, "finalize", WORDCOUNT)
    assert_taken_at(ws, ids, 2)
    assert state_bases(ws, ids[-1]) == {0: ids[1], 1: ids[1]}  # the restore below reads a delta chain
    assert_exact(ws)

    # parallelism 3: checkpoint 3's two subtask chains are read and split by key groups into three
    ids = [land_and_inject(ws, 3), land_and_inject(ws, 4)]
    out = cli_ok(ws, "process", WORDCOUNT, "--parallelism", "3", spark=spark)
    assert "checkpoint 3 was taken at parallelism 2, this run is at 3" in out
    cli_ok(ws, "finalize", WORDCOUNT)
    assert_taken_at(ws, ids, 3)
    # the stores at parallelism 2 are no run's any more: the tasks that loaded those at 3 removed them
    assert store_layouts(ws) == ["p3"] and "reloads" in out
    # few keys changed, yet the first snapshot at 3 is full: no delta on a base of other subtasks
    assert state_bases(ws, ids[0]) == dict.fromkeys(range(3))
    assert state_bases(ws, ids[1]) == dict.fromkeys(range(3), ids[0])
    assert_exact(ws)

    # parallelism 1, from ABS_PARALLELISM
    ids = [land_and_inject(ws, 5)]
    cli_ok(ws, "process", WORDCOUNT, spark=spark, env={"ABS_PARALLELISM": "1"})
    cli_ok(ws, "finalize", WORDCOUNT)
    assert_taken_at(ws, ids, 1)
    assert_exact(ws)

    # recover at parallelism 4 from checkpoint 5 (a delta chain at 3): 6 is superseded, 6 and the
    # pending 7 are replayed at 4; the replay of 6 is deduplicated by the sink
    pending = land_and_inject(ws, 6)
    assert pending == 7
    out = cli_ok(ws, "recover", WORDCOUNT, "--checkpoint", "5", "--parallelism", "4", spark=spark)
    assert "checkpoint 5 was taken at parallelism 3, this run is at 4" in out
    assert store_layouts(ws) == ["p4"]
    assert_taken_at(ws, [8, 9], 4)
    assert state_bases(ws, 8) == dict.fromkeys(range(4))
    with ws.store.engine.connect() as c:
        txns = dict(c.execute(text("SELECT checkpoint_id, status FROM sink_transactions WHERE checkpoint_id >= 8")).all())
    assert txns == {8: "DEDUPLICATED", 9: "COMMITTED"}
    assert_exact(ws)
    assert ws.committed() == ws.expected_at(7)

    # the catalog and the command line show the change
    history = json.loads(cli_ok(ws, "checkpoints", WORDCOUNT, "--json"))
    # 7 was pending when the recovery superseded it: no run took it
    assert [(h["checkpoint_id"], h["parallelism"]) for h in history] == [
        (1, 2), (2, 2), (3, 2), (4, 3), (5, 3), (6, 1), (7, None), (8, 4), (9, 4)]
    for h in history:
        if h["status"] in ("COMPLETED", "SUBSUMED"):
            assert h["acked_tasks"] == h["total_tasks"] == 4 * h["parallelism"], h
    assert "checkpoint 9 verified" in cli_ok(ws, "verify", WORDCOUNT, spark=spark)


def test_partial_recovery_across_a_change_of_parallelism_restarts_every_task(tmp_path, pg_url, spark,
                                                                             monkeypatch) -> None:
    from spark_jobs.run import snapshot

    ws = make_workspace(tmp_path, pg_url)
    ids = [land_and_inject(ws, 0, lines=100), land_and_inject(ws, 1)]
    cli_ok(ws, "process", WORDCOUNT, spark=spark)
    cli_ok(ws, "finalize", WORDCOUNT)

    def ack_first_only(self, checkpoint_id, handles, logs=None):  # the run dies before the second group acks
        self.store.ack_many(self.job.name, checkpoint_id, [h for h in handles if h.subtask == 0])

    def die_after_subtask_0_acks(*args: str) -> int:
        cid = land_and_inject(ws, ids[-1] + 1)
        ids.append(cid)
        with monkeypatch.context() as m:
            m.setattr(snapshot.SnapshotWriter, "_ack", ack_first_only)
            cli_ok(ws, "process", WORDCOUNT, *args, spark=spark)
        assert {a.subtask for a in ws.store.acks(WORDCOUNT, cid)} == {0}
        return cid

    # a run at 3 acked subtask 0 of checkpoint 3: at 2, that subtask holds other keys; nothing is kept
    cid = die_after_subtask_0_acks("--parallelism", "3")
    assert ws.store.checkpoint(WORDCOUNT, cid).parallelism == 3
    cli_ok(ws, "recover", WORDCOUNT, "--mode", "partial", spark=spark)
    assert_taken_at(ws, [cid], 2)
    assert_exact(ws)
    row = recovery.history(ws.store, WORDCOUNT)[-1]
    assert (row["mode"], row["result"]) == ("partial", "SUCCEEDED")
    assert f"partial: pending checkpoint(s) [{cid}] were taken at another parallelism than this run's 2" in row["detail"]
    assert "keep their state" not in row["detail"]

    # a run at 2 acked subtask 0 of checkpoint 4; a partial recovery at 3 cannot keep it either
    cid = die_after_subtask_0_acks()
    cli_ok(ws, "recover", WORDCOUNT, "--mode", "partial", "--parallelism", "3", spark=spark)
    assert_taken_at(ws, [cid], 3)
    assert_exact(ws)
    row = recovery.history(ws.store, WORDCOUNT)[-1]
    assert f"partial: checkpoint {cid - 1} was taken at parallelism 2, this run is at 3" in row["detail"]


def test_connected_components_rescales_with_its_back_edge_log(tmp_path, sqlite_url, spark) -> None:
    ws = make_workspace(tmp_path, sqlite_url, connected_components())
    land_graph(ws, batches=3)
    cli_ok(ws, "process", CC, spark=spark)
    cli_ok(ws, "finalize", CC)
    assert_taken_at(ws, [1, 2, 3], 2, CC_OPERATORS)
    log_records = back_edge_records(ws, 3)
    assert log_records > 0  # labels still circulate: the log written by two subtasks is restored by three
    for _ in range(6):
        ws.coordinator.inject()  # no new edges: the loop drains
    out = cli_ok(ws, "process", CC, "--parallelism", "3", spark=spark)
    assert "checkpoint 3 was taken at parallelism 2, this run is at 3" in out
    assert f"feeding back-edge log 3 ({log_records:,} records) to the loop head first" in out
    cli_ok(ws, "finalize", CC)
    latest = ws.store.latest_completed(CC).checkpoint_id
    assert latest == 9 and back_edge_records(ws, latest) == 0
    assert_taken_at(ws, list(range(4, 10)), 3, CC_OPERATORS)
    with ws.store.engine.connect() as c:
        log_subtasks = c.execute(text("SELECT COUNT(*) FROM back_edge_logs WHERE job = :j AND checkpoint_id = 4"),
                                 {"j": CC}).scalar_one()
    assert log_subtasks == 3
    assert committed_labels(ws) == expected(ws)
    assert "checkpoint 9 verified" in cli_ok(ws, "verify", CC, spark=spark)


@pytest.mark.parametrize("args, env", [
    (("process", WORDCOUNT, "--parallelism", "129"), {}),
    (("run", WORDCOUNT, "--parallelism", "129"), {}),
    (("recover", WORDCOUNT, "--parallelism", "129"), {}),
    (("rewind", WORDCOUNT, "--to", "1", "--parallelism", "129"), {}),
    (("process", WORDCOUNT), {"ABS_PARALLELISM": "129"}),
], ids=["process", "run", "recover", "rewind", "env"])
def test_a_parallelism_above_max_parallelism_exits_2_and_changes_nothing(tmp_path, sqlite_url, args, env) -> None:
    ws = make_workspace(tmp_path, sqlite_url)
    ws.land(0, lines=20)
    ws.coordinator.inject()
    r = cli(ws, *args, env=env)
    assert r.code == 2, r.out + r.err
    assert r.err.strip() == (
        "error: job 'wordcount': parallelism 129 is above its max_parallelism 128 (the number of key groups its "
        "state is split into, fixed for the job's life); use at most 128"
    )
    assert ws.store.job(WORDCOUNT).total_tasks == 8
    assert [(c.status, c.parallelism) for c in ws.store.checkpoints(WORDCOUNT)] == [("PENDING", None)]


def test_max_parallelism_is_the_job_rows_and_the_application_refuses_too(tmp_path, sqlite_url, monkeypatch,
                                                                         capsys) -> None:
    from spark_jobs import process

    ws = make_workspace(tmp_path, sqlite_url)
    with ws.store.engine.begin() as c:
        c.execute(text("UPDATE jobs SET max_parallelism = 4 WHERE name = 'wordcount'"))
    r = cli(ws, "process", WORDCOUNT, "--parallelism", "5")
    assert r.code == 2 and "parallelism 5 is above its max_parallelism 4" in r.err
    assert cli(ws, "process", WORDCOUNT, "--parallelism", "0").code == 2
    # the application itself (what the epochs DAG submits) reads ABS_PARALLELISM, and refuses before Spark
    for key, value in {**ws.env(), "ABS_PARALLELISM": "5"}.items():
        monkeypatch.setenv(key, value)
    assert process.run([WORDCOUNT]) == 2
    assert "parallelism 5 is above its max_parallelism 4" in capsys.readouterr().err
    assert process.run([WORDCOUNT, "--parallelism", "0"]) == 2
    monkeypatch.setenv("ABS_PARALLELISM", "two")
    assert process.run([WORDCOUNT]) == 2
    assert "ABS_PARALLELISM must be a whole number >= 1, not 'two'" in capsys.readouterr().err
