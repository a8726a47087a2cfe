"""A window's late records are dead letters of the window alone (tests/jobs/late_clicks.py): the per-user
aggregate reading the same source counts them, and `verify` recomputes it with them (it used to drop every
dead letter from every operator's input, and said the correct aggregate DIFFERS), and so does a recovery that
replays their epochs. The sinks equal plain Python over the clicks: the aggregate counts every click, the
window skips the late ones. A rewind then deletes the window's dead letters of the epochs after its
checkpoint's, whatever the ids of the checkpoints that recorded them (a rewind to the recovery's replay of
epoch 2 deletes epoch 3's, still under the superseded 3), and its replays record them again, once; the
sources' dead letters stay under the checkpoint that registered them."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import text

from coordinator.dataflow.discovery import get_job
from tests.window_reference import tumbling
from tests.helpers import JOBS_DIR, cli, make_workspace

pytestmark = [pytest.mark.spark]
JOBS = str(JOBS_DIR)
MINUTE = 60_000
WINDOW, DELAY = 10 * MINUTE, 5 * MINUTE
T0 = 2_983_334 * WINDOW  # epoch ms, on a window boundary
#: each batch's click minutes: on time, then (from batch 1 on) behind the watermark, some of them too late
MINUTES = [list(range(25)), [*range(25, 45), 2, 7, 9, 12, 18], [*range(45, 60), 4, 16, 23, 31, 33, 38]]


def clicks_of(batch: int) -> list[dict]:
    return [{"id": f"c{batch}-{i}", "ts": T0 + m * MINUTE + i, "user": f"u{i % 3}", "page": f"/p{i % 4}"}
            for i, m in enumerate(MINUTES[batch])]


def land(input_dir: Path, batch: int, clicks: list[dict], extra: list[str] = ()) -> None:
    """The batch's clicks over two partitions, one segment each; ``extra`` lines end partition p0's."""
    for part in range(2):
        lines = [json.dumps(c) for c in clicks[part::2]] + (list(extra) if part == 0 else [])
        path = input_dir / f"p{part}" / f"seg-{batch:04d}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_name(".tmp").write_text("".join(line + "\n" for line in lines))
        os.replace(path.with_name(".tmp"), path)


def windows_of(batches: list[list[dict]]) -> tuple[Counter, set[str]]:
    return tumbling(batches, WINDOW, DELAY, "ts")


@pytest.mark.sink_unchecked("judged here against plain Python over the clicks")
def test_verify_recomputes_the_aggregate_with_the_windows_late_clicks(tmp_path, sqlite_url, spark, monkeypatch) -> None:
    monkeypatch.setenv("ABS_JOBS_DIR", JOBS)
    ws = make_workspace(tmp_path, sqlite_url, get_job("late_clicks"), jobs_dir=JOBS)
    batches = [clicks_of(b) for b in range(len(MINUTES))]
    for b, clicks in enumerate(batches):
        # the last batch also resends a click and holds a line that is no record: the sources' dead letters
        land(ws.input_dir, b, clicks, [json.dumps(batches[1][0]), "{not json"] if b == 2 else [])
        ws.coordinator.inject()
        assert not ws.run_epochs(spark).failed
        ws.coordinator.finalize()

    every = [c for clicks in batches for c in clicks]
    windows, late = windows_of(batches)
    assert len(late) == 6  # of the 11 clicks behind the watermark, those at minutes 2, 7, 9; 4, 16, 23
    with ws.store.engine.connect() as c:
        per_user = {u: (n, last) for u, n, last in c.execute(text(
            'SELECT "user", clicks, last FROM late_clicks_per_user'))}
        emitted = Counter({(u, start): n for u, start, n in c.execute(text(
            'SELECT "user", window_start, clicks FROM late_clicks_per_10_minutes'))})
        dead = c.execute(text("SELECT segment, payload FROM dead_letters WHERE job = 'late_clicks'")).all()
    users = {c["user"] for c in every}
    assert per_user == {u: (sum(c["user"] == u for c in every), max(c["ts"] for c in every if c["user"] == u))
                        for u in users}
    assert emitted == windows
    assert {json.loads(p)["id"] for s, p in dead if s == "per_10_minutes"} == late
    assert sum(s != "per_10_minutes" for s, _ in dead) == 2  # the resent click and the line that is no record

    r = cli(ws, "verify", "late_clicks", spark=spark)
    assert r.code == 0, r.out + r.err
    assert "checkpoint 3 verified" in r.out

    # a recovery replays epochs 2 and 3, whose late clicks are dead letters of the window already: the aggregate
    # reads them again (a replay used to drop them for every operator), the window finds them late again
    r = cli(ws, "recover", "late_clicks", "--checkpoint", "1", spark=spark)
    assert r.code == 0, r.out + r.err
    ws.coordinator.finalize()
    with ws.store.engine.connect() as c:
        replayed = {u: (n, last) for u, n, last in c.execute(text(
            'SELECT "user", clicks, last FROM late_clicks_per_user'))}
        again = c.execute(text("SELECT segment, payload FROM dead_letters WHERE job = 'late_clicks'")).all()
    assert replayed == per_user
    assert sorted(json.loads(p)["id"] for s, p in again if s == "per_10_minutes") == sorted(late)  # once each
    r = cli(ws, "verify", "late_clicks", spark=spark)
    assert r.code == 0, r.out + r.err

    # a rewind to checkpoint 4, the replay of epoch 2, deletes epoch 3's late clicks: still under the superseded
    # 3 (its replay 5 deduplicated them), an id below 4. Deleting those above 4 kept them, and the replay of
    # epoch 3 (6) recorded them a second time
    r = cli(ws, "rewind", "late_clicks", "--to", "4", spark=spark)
    assert r.code == 0, r.out + r.err
    ws.coordinator.finalize()
    with ws.store.engine.connect() as c:
        (replay,) = c.execute(text("SELECT checkpoint_id FROM checkpoints WHERE job = 'late_clicks' "
                                   "AND status = 'COMPLETED' AND replay_of = 5")).scalars()
        halfway = c.execute(text("SELECT checkpoint_id, segment, payload FROM dead_letters WHERE job = 'late_clicks'")).all()
        emitted_again = Counter({(u, start): n for u, start, n in c.execute(text(
            'SELECT "user", window_start, clicks FROM late_clicks_per_10_minutes'))})
    assert sorted(json.loads(p)["id"] for _, s, p in halfway if s == "per_10_minutes") == sorted(late)  # once each
    assert {ck for ck, s, _ in halfway if s == "per_10_minutes"} == {2, replay}  # epoch 2's, and epoch 3's replay's
    assert emitted_again == windows

    # a rewind to checkpoint 1 deletes the window's dead letters of the later epochs (under 2, whose replay 4
    # deduplicated them, and under 6), and its replays record them again under their own ids; the sources' dead
    # letters stay under checkpoint 3, whose barrier registered them
    r = cli(ws, "rewind", "late_clicks", "--to", "1", spark=spark)
    assert r.code == 0, r.out + r.err
    ws.coordinator.finalize()
    with ws.store.engine.connect() as c:
        replays = dict(c.execute(text("SELECT checkpoint_id, replay_of FROM checkpoints WHERE job = 'late_clicks' "
                                      "AND status = 'COMPLETED' AND replay_of IN (4, :replay)"),
                                 {"replay": replay}).all())
        rewound = c.execute(text("SELECT checkpoint_id, segment, payload FROM dead_letters WHERE job = 'late_clicks'")).all()
    assert sorted(replays.values()) == [4, replay]
    assert sorted(json.loads(p)["id"] for _, s, p in rewound if s == "per_10_minutes") == sorted(late)
    assert {ck for ck, s, _ in rewound if s == "per_10_minutes"} == set(replays)
    assert sorted((ck, p) for ck, s, p in rewound if s != "per_10_minutes") == sorted(
        (3, p) for s, p in dead if s != "per_10_minutes")
