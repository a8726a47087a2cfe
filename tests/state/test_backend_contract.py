"""The keyed-state backend contract (``spark_jobs.state.backend``): the same suite on every engine, as the
catalog's store contract runs on SQLite and PostgreSQL. A third engine is one folder that passes it.

Each test drives one keyed aggregate (count, sum, min, max, mean: what both engines keep) through the
interface alone: open at a restore point, apply epochs (through the dataflow, as a run does), take a
snapshot's synchronous phase, write it on, restore from the files it wrote. A plain-Python fold of the same
records is the reference.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

import absreplay.api as abs
from coordinator.checkpoints import state_files
from coordinator.checkpoints.state_chain import ChainLink
from spark_jobs.operators.dataflow import dataflow_of
from spark_jobs.state import keyed_state
from spark_jobs.state.backend import KeyedState, KeyedStateBackend, RestorePoint, SnapshotTarget
from spark_jobs.state.frames.frame_state import FrameBackend
from spark_jobs.state.stores.provider import StoreBackend

OP = "per_sensor"
MAX_PARALLELISM = 128


def declared() -> abs.Job:
    job = abs.Job("backend_contract", parallelism=2)
    readings = job.source("readings", abs.json_lines({"sensor": str, "value": int, "reading": float}))
    readings.key_by("sensor", str).aggregate(
        OP, n=abs.count(), total=abs.sum("value"), lo=abs.min("value"), hi=abs.max("reading", float),
        avg=abs.mean("reading")).sink("per_sensor_out", abs.SqlTable("contract_per_sensor"))
    return job


JOB = declared().definition()
FLOW = dataflow_of(JOB)
SPEC = JOB.state(OP)
VISIBLE = ["sensor", "n", "total", "lo", "hi", "avg", "updated"]

#: epoch -> its records (sensor, value, reading); readings are halves, so every sum is exact
EPOCHS = {
    1: [(f"s{i % 7}", i, i / 2) for i in range(40)],
    2: [(f"s{i % 3}", 100 + i, i / 2 + 50) for i in range(9)] + [("new", -5, -2.5)],
    3: [(f"s{i % 11}", 7 * i, i / 2) for i in range(33)],
}


def engine(name: str, spark, state_uri: str) -> KeyedStateBackend:
    """A fresh engine of a run: its own incarnation, so nothing is found where an earlier one left it."""
    if name == "frames":
        return FrameBackend(JOB, {OP})
    return StoreBackend(spark, JOB, FLOW.nodes, state_uri, MAX_PARALLELISM, f"contract-{uuid.uuid4().hex}")


ENGINES = ["frames", "stores"]


@pytest.fixture(params=ENGINES)
def make(request, spark, tmp_path, monkeypatch) -> Callable[[], KeyedStateBackend]:
    monkeypatch.setenv("ABS_STORE_DIR", str(tmp_path / "stores"))
    state_uri = str(tmp_path / "state")
    return lambda: engine(request.param, spark, state_uri)


def records(spark, epoch: int):
    return {"readings": spark.createDataFrame(EPOCHS[epoch], "sensor string, value long, reading double")}


def reference(upto: int, only: Callable[[str], bool] = lambda key: True) -> set[tuple]:
    """The state after epochs 1..``upto`` of the keys ``only`` takes, folded in plain Python."""
    rows: dict[str, list] = {}
    for epoch in range(1, upto + 1):
        for sensor, value, reading in EPOCHS[epoch]:
            if not only(sensor):
                continue
            n, total, lo, hi, s, _ = rows.get(sensor, (0, 0, value, reading, 0.0, 0))
            rows[sensor] = (n + 1, total + value, min(lo, value), max(hi, reading), s + reading, epoch)
    return {(k, n, total, lo, hi, round(s / n, 9), at) for k, (n, total, lo, hi, s, at) in rows.items()}


def visible(rows) -> set[tuple]:
    """A DataFrame of the state's rows, as ``reference`` gives them."""
    return {(r.sensor, r.n, r.total, r.lo, r.hi, round(r.avg, 9), r.updated) for r in rows.select(*VISIBLE).collect()}


def opened(backend: KeyedStateBackend, spark, point: int | None, links: list[ChainLink]) -> KeyedState:
    """``backend``'s state at ``point``, as a run's restore hands it over: the chain, and the state read as one
    DataFrame unless the engine reads its files itself."""
    schema = FLOW.state_schema(spark, OP)

    def read(op: str):
        return keyed_state.restore(spark, schema, SPEC.key, links, JOB.parallelism, SPEC.identity)

    frame = None if OP in backend.reads_own_files else read(OP)
    return backend.open(RestorePoint(point, {OP: links}, JOB.parallelism if links else None, False, {OP: frame},
                                     read))[OP]


def applied(spark, state: KeyedState, epoch: int, subtasks: frozenset[int] | None = None) -> KeyedState:
    return FLOW.epoch(spark, {OP: state}, records(spark, epoch), None, {}, epoch, None, subtasks=subtasks).states[OP]


def written(spark, state: KeyedState, checkpoint_id: int, state_uri: str, base: int | None):
    snapshot = state.snapshot(checkpoint_id)
    return snapshot.write(SnapshotTarget(
        spark, SPEC, checkpoint_id, state_files.operator_dir(state_uri, JOB.name, checkpoint_id, OP),
        f"{state_files.spark_uri(state_uri)}/{JOB.name}", base is None, base, JOB.parallelism, MAX_PARALLELISM))


def links_of(checkpoint_id: int, handles) -> list[ChainLink]:
    return [ChainLink(checkpoint_id, h.subtask, h.state_uri, h.state_rows, h.checksum, h.base_checkpoint_id is None)
            for h in handles if h.state_rows]


def test_an_epoch_gives_a_new_state_and_leaves_the_one_it_applied_to_as_it_was(make, spark) -> None:
    empty = opened(make(), spark, None, [])
    assert visible(empty.rows(spark)) == set() and empty.emitted is None
    first = applied(spark, empty, 1)
    second = applied(spark, first, 2)
    assert visible(second.rows(spark)) == reference(2)
    assert visible(first.rows(spark)) == reference(1)  # read after epoch 2 was applied: still state 1
    changed = {row for row in reference(2) if row[-1] == 2}
    assert visible(second.emitted) == changed  # what the operator emits: the rows epoch 2 changed
    assert visible(second.rows(spark, since=1)) == changed


def test_a_snapshot_written_after_later_epochs_holds_its_own_checkpoint(make, spark, tmp_path) -> None:
    state_uri = str(tmp_path / "state")
    first = applied(spark, opened(make(), spark, None, []), 1)
    second = applied(spark, first, 2)
    one = written(spark, first, 1, state_uri, None)  # the writer thread, while epoch 2 is applied already
    two = written(spark, second, 2, state_uri, 1)
    assert one.full and one.rows == len(reference(1)) == sum(h.state_rows for h in one.handles)
    assert [h.subtask for h in one.handles] == list(range(JOB.parallelism))
    assert all(h.checksum for h in one.handles if h.state_rows) and all(h.base_checkpoint_id is None
                                                                        for h in one.handles)
    changed = {row for row in reference(2) if row[-1] == 2}
    assert not two.full and two.changed == len(changed) == sum(h.state_rows for h in two.handles)
    assert all(h.base_checkpoint_id == 1 for h in two.handles)
    assert all(h.state_uri.endswith(f"chk-2/{OP}/subtask={h.subtask}") for h in two.handles if h.state_rows)


def test_a_restore_from_the_files_it_wrote_gives_the_state_back_and_goes_on_alike(make, spark, tmp_path) -> None:
    state_uri = str(tmp_path / "state")
    first = applied(spark, opened(make(), spark, None, []), 1)
    second = applied(spark, first, 2)
    one = links_of(1, written(spark, first, 1, state_uri, None).handles)
    chain = links_of(2, written(spark, second, 2, state_uri, 1).handles) + one  # newest first
    restored = opened(make(), spark, 2, chain)  # another run: nothing but the files
    assert visible(restored.rows(spark)) == reference(2)
    assert visible(applied(spark, restored, 3).rows(spark)) == visible(applied(spark, second, 3).rows(spark)) == \
        reference(3)


def test_a_partial_recovery_applies_the_epoch_to_the_subtasks_behind_it_alone(make, spark) -> None:
    first = applied(spark, opened(make(), spark, None, []), 1)
    behind = frozenset({0})
    second = applied(spark, first, 2, subtasks=behind).keep_past(first, behind, SPEC.key, JOB.parallelism,
                                                                 MAX_PARALLELISM)
    subtask = {r.sensor: r.s for r in spark.createDataFrame([(k,) for k in {s for e in EPOCHS.values()
                                                                            for s, _, _ in e}], "sensor string")
               .select("sensor", keyed_state.subtask_of("sensor", JOB.parallelism, MAX_PARALLELISM).alias("s"))
               .collect()}
    assert set(subtask.values()) == {0, 1}
    assert visible(second.rows(spark)) == reference(2, lambda k: subtask[k] == 0) | reference(
        1, lambda k: subtask[k] == 1)
