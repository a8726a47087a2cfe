"""At most one processing run per job: a second one stops at once with exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.catalog.db import make_engine
from coordinator.checkpoints.lease import LeaseHeldError, processing_lease
from tests.helpers import make_workspace


def test_lease_is_exclusive_per_job_and_released(catalog_url: str) -> None:
    engine, other = make_engine(catalog_url), make_engine(catalog_url)
    with processing_lease(engine, "wordcount"):
        with pytest.raises(LeaseHeldError, match="another processing run of job 'wordcount'"):
            with processing_lease(other, "wordcount"):
                pass
        with processing_lease(other, "another_job"):
            pass
    with processing_lease(other, "wordcount"):  # released with its holder's context
        pass


def test_second_process_run_exits_2_and_writes_nothing(tmp_path, pg_url) -> None:
    ws = make_workspace(tmp_path, pg_url)
    ws.land(0, lines=50)
    ws.coordinator.inject()
    absreplay = str(Path(sys.executable).parent / "absreplay")
    with processing_lease(make_engine(pg_url), "wordcount"):
        r = subprocess.run([absreplay, "process", "wordcount"], env={**os.environ, **ws.env()},
                           capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "holds its lease" in r.stderr
    assert ws.store.acks(ws.job.name, 1) == []
    assert ws.store.checkpoint(ws.job.name, 1).status == "PENDING"


def test_no_checkpoint_expires_while_a_processing_run_holds_the_lease(tmp_path, catalog_url: str) -> None:
    """A live run may still be writing a pending checkpoint: expiry waits until the lease is free."""
    from datetime import timedelta

    from coordinator.catalog.models import utcnow
    from coordinator.checkpoints.lease import expire_unless_processing

    ws = make_workspace(tmp_path, catalog_url)
    ws.land(0, lines=10)
    ws.coordinator.inject()
    much_later = utcnow() + timedelta(days=30)
    with processing_lease(make_engine(catalog_url), "wordcount"):
        assert expire_unless_processing(ws.store, "wordcount", much_later) == []
        assert ws.store.checkpoint("wordcount", 1).status == "PENDING"
    assert expire_unless_processing(ws.store, "wordcount", much_later) == [1]
