"""A workspace for one test: settings in temporary directories, the store and coordinator."""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text, update

from absreplay.commands.process_group import stop_process_group  # noqa: F401 - one way to stop a process group
from absreplay.commands.standalone_cluster import free_port  # noqa: F401 - one way to pick a port
from absreplay_examples.definitions import wordcount
from absreplay_examples.recount import recount
from absreplay_examples.sample_data import land_batch
from coordinator.catalog.db import make_engine
from coordinator.checkpoints import state_files
from coordinator.checkpoints.coordinator import CheckpointCoordinator
from coordinator.checkpoints.state_handle import StateHandle
from coordinator.checkpoints.store import CheckpointStore
from coordinator.dataflow.jobs import JobDefinition
from coordinator.faults import ProcessCrash
from coordinator.settings import Settings
from coordinator.sources import source

# typer (0.29) sets PYDANTIC_DISABLE_PLUGINS while it builds a parameter's converter, and deletes it afterwards when it
# was unset: two commands parsing their arguments at once in this process (``cli`` from several threads, as
# tests/catalog/test_serialization.py does) both deleted it and the second raised KeyError. Set, it is only set again
# and put back. Only the tests run commands in threads of one process.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "1")

#: the test jobs found through ABS_JOBS_DIR (``tests/jobs/``)
JOBS_DIR = Path(__file__).parent / "jobs"


@dataclass
class Workspace:
    settings: Settings
    store: CheckpointStore
    job: JobDefinition
    coordinator: CheckpointCoordinator

    @property
    def input_dir(self) -> Path:
        return source.input_dir(self.settings.data_dir, self.job.name)

    @property
    def stores(self) -> Path:
        """This job's local stores on this host (``spark_jobs.state.stores.provider.store_root``)."""
        from spark_jobs.state.stores.provider import incarnation, store_root

        return store_root(self.job.name, incarnation(self.store.job(self.job.name).created_at))

    def land(self, batch: int, lines: int = 400, partitions: int = 2, vocab: int = 300) -> int:
        return land_batch(self.input_dir, batch, lines, partitions=partitions, vocab_size=vocab)

    def committed(self) -> dict[str, int]:
        with self.store.engine.connect() as c:
            return dict(c.execute(text("SELECT word, count FROM wordcount_counts")).all())

    def expected_at(self, checkpoint_id: int | None) -> dict[str, int]:
        cut = self.store.cut(self.job.name, checkpoint_id) if checkpoint_id else {}
        return dict(recount(self.input_dir, cut))

    def expected_latest(self) -> dict[str, int]:
        latest = self.store.latest_completed(self.job.name)
        return self.expected_at(latest.checkpoint_id if latest else None)

    def run_epochs(self, spark, mode: str = "async", **kwargs):
        from spark_jobs.run.runner import EpochRunner
        from coordinator.modes import SnapshotMode

        runner = EpochRunner(
            spark, self.store, self.job, self.settings.data_dir, self.settings.state_uri,
            mode=SnapshotMode(mode), **kwargs,
        )
        return runner.run()

    def epoch(self, spark, land: Callable[[Path], object] | None = None) -> int:
        """``land(input_dir)`` (what is landed already, without it), inject, process (no snapshot may fail),
        finalize: one epoch in this process. Returns the latest completed checkpoint."""
        if land is not None:
            land(self.input_dir)
        self.coordinator.inject()
        failed = self.run_epochs(spark).failed
        assert not failed, failed
        self.coordinator.finalize()
        return self.store.latest_completed(self.job.name).checkpoint_id

    def cycle(self, spark, batch: int) -> int:
        """Land wordcount's batch ``batch``, then one ``epoch``. Returns the lines landed."""
        landed = self.land(batch)
        self.epoch(spark)
        return landed

    def env(self) -> dict[str, str]:
        return self.settings.as_env()

    def complete(self, checkpoint_id: int, store: CheckpointStore | None = None) -> list:
        """Checkpoint ``checkpoint_id`` acked by every task without state: COMPLETED with no Spark.
        ``store``: ack through this one (a fenced store may refuse); returns the ack results."""
        return (store or self.store).ack_many(
            self.job.name, checkpoint_id, [StateHandle(t.operator, t.subtask) for t in self.job.execution_graph.tasks])


#: the workspaces made by the running test: tests/sink_check.py judges each one's sink after the test
WORKSPACES: list[Workspace] = []


def make_workspace(tmp_path: Path, url: str, job: JobDefinition | None = None, jobs_dir: str = "",
                   env: dict[str, str] | None = None) -> Workspace:
    """A job's workspace under ``tmp_path``; ``env``: settings over the defaults (``ABS_DATA_DIR``, ...)."""
    settings = Settings.from_env(
        {"ABS_HOME": str(tmp_path / "home"), "ABS_DATABASE_URL": url, "ABS_SPARK_MASTER": "local[2]",
         "ABS_JOBS_DIR": jobs_dir, **(env or {})}
    )
    store = CheckpointStore(make_engine(url))
    job = job or wordcount()
    store.register_job(job)
    ws = Workspace(settings, store, job, CheckpointCoordinator(store, job, settings.data_dir, settings.state_uri))
    WORKSPACES.append(ws)
    return ws


def rewrite_unseen(segment: Path, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` (as long) in a registered segment keeping its size and mtime: the one
    change inject cannot see; a run sees it by the segment's content tag, unless it has none
    (``registered_untagged``), and then what reads it reads other input."""
    assert len(old.encode()) == len(new.encode())
    st = segment.stat()
    text = segment.read_text()
    assert old in text
    segment.write_text(text.replace(old, new))
    os.utime(segment, ns=(st.st_atime_ns, st.st_mtime_ns))


def registered_untagged(ws) -> None:
    """The job's segments as if registered before content tags (revision 0010): checked by size and mtime."""
    from coordinator.catalog.models import SourceSegment

    with ws.store.sessions.begin() as s:
        s.execute(update(SourceSegment).where(SourceSegment.job == ws.job.name).values(content_tag=None))


ABSREPLAY = str(Path(sys.executable).parent / "absreplay")


def start(ws, *args: str, faults: str = "", env: dict[str, str] | None = None) -> subprocess.Popen:
    env = {**os.environ, **ws.env(), "ABS_SPARK_MASTER": "local[2]", "ABS_FAULTS": faults, **(env or {})}
    return subprocess.Popen(
        [ABSREPLAY, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )


def kill_when(proc: subprocess.Popen, marker: str, timeout: float = 240) -> str:
    """Read the output until ``marker`` appears, then SIGKILL the process group."""
    seen: list[str] = []
    found = threading.Event()

    def pump() -> None:
        for line in proc.stdout:
            seen.append(line)
            if marker in line:
                found.set()

    threading.Thread(target=pump, daemon=True).start()
    assert found.wait(timeout), f"never reached {marker!r}:\n{''.join(seen[-40:])}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    return "".join(seen)


@dataclass
class CliResult:
    code: int
    out: str
    err: str


#: patched_env's variables in use: name -> [commands using it, its value before the first]
_PATCHED: dict[str, list] = {}
_PATCHED_LOCK = threading.Lock()


@contextlib.contextmanager
def patched_env(values: dict[str, str]):
    """Set these environment variables, and once no command in this process uses them any more, put back
    only them. Several threads may do this at once (tests/catalog/test_serialization.py): unlike
    ``mock.patch.dict``, which clears and refills the whole environment (another thread setting a variable
    meanwhile raised KeyError), and unlike putting back what each one found, which unset a variable under a
    command still running (the first of two overlapping commands put back "unset" while the second ran)."""
    with _PATCHED_LOCK:
        for k, v in values.items():
            users = _PATCHED.setdefault(k, [0, os.environ.get(k)])
            users[0] += 1
            os.environ[k] = v
    try:
        yield
    finally:
        with _PATCHED_LOCK:
            for k in values:
                users = _PATCHED[k]
                users[0] -= 1
                if users[0] == 0:
                    del _PATCHED[k]
                    if users[1] is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = users[1]


def cli(ws, *args: str, spark=None, env: dict[str, str] | None = None) -> CliResult:
    """`absreplay ARGS` as typed, in this process: the same entry point, exit code and output.

    With ``spark``, the Spark applications the command would spark-submit run on that session
    instead (``absreplay.commands.submit.run_in_session``): no JVM starts. ``env`` adds to ``ws.env()``."""
    from absreplay.commands import cli as absreplay_cli
    from absreplay.commands import submit

    out, err = io.StringIO(), io.StringIO()
    launch = submit.run_processing
    if spark is not None:
        def launch(settings, app_args, app=submit.PROCESS_APP):  # noqa: ARG001 - settings come from the env
            return submit.run_in_session(spark, app_args, app)
    with (
        patched_env({**(ws.env() if ws else {}), **(env or {})}),
        mock.patch.object(submit, "run_processing", launch),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            absreplay_cli.main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return CliResult(code, out.getvalue(), err.getvalue())


def one_line_error(result: CliResult, needle: str) -> None:
    """Bad input as the command line reports it: exit code 2, one line naming the problem, no traceback."""
    lines = [ln for ln in result.err.strip().splitlines() if ln.strip()]
    assert result.code == 2, result.err + result.out
    assert len(lines) == 1 and needle in lines[0], result.err
    assert "Traceback" not in result.err


def cli_ok(ws, *args: str, spark=None, env: dict[str, str] | None = None) -> str:
    r = cli(ws, *args, spark=spark, env=env)
    assert r.code == 0, r.out + r.err
    return r.out


def crash(ws, spark, point: str, *args: str, env: dict[str, str] | None = None) -> None:
    """``absreplay ARGS`` as typed, on the test's session (``cli``), dying at fault point ``point``
    (``name[@checkpoint][/k]``): ``ProcessCrash``, which leaves what a SIGKILL there leaves
    (``coordinator.faults``), without a Spark application of its own. Fails if the run never gets there."""
    name = re.split("[@/]", point)[0]
    with pytest.raises(ProcessCrash, match=f"simulated crash at {re.escape(name)}"):
        cli(ws, *args, spark=spark, env={**(env or {}), "ABS_FAULTS": f"{point}=crash"})


def crash_then_kill(ws, job: str, land, spark) -> None:
    """Five batches of ``land(input_dir, batch)``, a crash and a SIGKILL of ``absreplay recover``: the crash at
    the fault point of epoch 2's computation (``crash``: epoch 1 done, its snapshot complete or not), then a
    real SIGKILL of the command's process group from outside once epoch 3 is done (in epoch 4,
    or a snapshot). The caller recovers after them and checks."""
    for batch in range(3):
        land(ws.input_dir, batch)
        ws.coordinator.inject()
    crash(ws, spark, "epoch.compute@2", "recover", job)
    latest = ws.store.latest_completed(job)
    assert latest is None or latest.checkpoint_id == 1, latest
    for batch in range(3, 5):
        land(ws.input_dir, batch)
        ws.coordinator.inject()
    out = kill_when(start(ws, "recover", job), "] epoch 3:")
    assert "] epoch 5:" not in out


def lost_and_duplicated(expected: dict[str, int], got: dict[str, int]) -> tuple[int, int]:
    """The exactly-once checker: word occurrences missing from the sink, and counted too often."""
    lost = sum(max(0, n - got.get(w, 0)) for w, n in expected.items())
    duplicated = sum(max(0, n - expected.get(w, 0)) for w, n in got.items())
    return lost, duplicated


def stage_counts(ws: Workspace, checkpoint_id: int, counts: dict[str, int], base: int | None) -> Path:
    """What a wordcount run stages for a checkpoint, without Spark: the changed rows as one Parquet
    file, sealed (durable, with its manifest), and the sink transaction. Returns the file."""
    from coordinator.checkpoints import manifests
    from coordinator.sinks import transactions as sinks

    op_uri = state_files.operator_dir(ws.settings.state_uri, ws.job.name, checkpoint_id, ws.job.state_operator)
    part = Path(op_uri.removeprefix("file://")) / "subtask=0"
    part.mkdir(parents=True)
    words = sorted(counts)
    pq.write_table(pa.table({"word": words, "count": pa.array([counts[w] for w in words], pa.int64()),
                             "updated": pa.array([checkpoint_id] * len(words), pa.int64())}),
                   part / "part-0.parquet")
    manifest = manifests.seal(op_uri, f"{state_files.spark_uri(ws.settings.state_uri)}/{ws.job.name}")
    with ws.store.sessions.begin() as s:
        sinks.stage(s, ws.job.name, ws.job.sinks[0].name, checkpoint_id, op_uri, base, len(words), manifest)
    return part / "part-0.parquet"
