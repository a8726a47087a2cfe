"""Wordcount with its input and state on HDFS (a MiniDFSCluster, ``tests/servers/hdfs.py``): no local folder
holds a segment or a snapshot. Segments land as a hidden temporary file renamed into place (HDFS renames
atomically); the coordinator and the executors' Python reach HDFS through hdfs-native, Spark through its own
Hadoop client. Three epochs, ``process`` SIGKILLed inside the third, ``recover``: the sink equals an
independent recount read back from HDFS, ``absreplay verify`` exits 0; a segment rewritten after its barrier
(a new modification time and length) is refused by the next barrier, naming it.
"""

from __future__ import annotations

import pytest

from coordinator.catalog.db import upgrade
from tests.helpers import cli, make_workspace
from tests.servers.hdfs import HdfsServer, hdfs_server
from tests.servers.remote_runs import killed_in_third_epoch, ok

pytestmark = [pytest.mark.spark]


@pytest.fixture
def hdfs(tmp_path) -> HdfsServer:
    with hdfs_server(tmp_path / "hdfs") as server:  # up until the sink is judged, after the test's body
        yield server


@pytest.mark.heavy(seconds=150)
def test_wordcount_on_hdfs_survives_a_kill_and_refuses_a_rewritten_file(tmp_path, hdfs, summary) -> None:
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    upgrade(catalog)
    ws = make_workspace(tmp_path, catalog, env={"ABS_DATA_DIR": hdfs.uri("/abs/input"),
                                                "ABS_STATE_URI": hdfs.uri("/abs/state")})
    killed_in_third_epoch(ws, lambda batch: ws.land(batch, lines=600))
    recovered = ok(ws, "recover", ws.job.name)
    assert ws.store.latest_completed(ws.job.name).checkpoint_id == 3, recovered
    assert ws.committed() == ws.expected_latest()
    assert "checkpoint 3 verified" in ok(ws, "verify", ws.job.name)

    segment = ws.input_dir / "p1" / "seg-000002.txt"
    landed = segment.read_bytes()
    segment.write_bytes(landed + b"one more line\n")
    refused = cli(ws, "inject", ws.job.name)
    assert refused.code == 2, refused.out + refused.err
    assert f"segment {segment} changed after inject" in refused.err
    segment.write_bytes(landed)  # put back: a new modification time, the registered content
    assert cli(ws, "inject", ws.job.name).code == 0
    summary(f"wordcount on HDFS: process SIGKILLed inside epoch 3, recovered to checkpoint 3; sink = recount, "
            f"verify exit 0; a rewritten file refused: {refused.err.strip()[:100]}")
