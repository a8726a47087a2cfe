"""Commands of the tests whose input and state are on a server (an S3 store, HDFS), each in a process of its
own as a user runs them: its Spark application's output is the command's."""

from __future__ import annotations

from tests.helpers import start


def command(ws, *args: str, faults: str = "") -> tuple[int, str]:
    """``absreplay ARGS`` in a process of its own (its Spark application's output included)."""
    proc = start(ws, *args, faults=faults)
    out, _ = proc.communicate(timeout=600)
    return proc.returncode, out


def ok(ws, *args: str) -> str:
    code, out = command(ws, *args)
    assert code == 0, out[-4000:]
    return out


def killed_in_third_epoch(ws, land) -> None:
    """Three batches landed and injected, and ``process`` SIGKILLed with its Spark JVM (their process group)
    in the third epoch, the three run together (a catch-up): nothing of the run completed."""
    for batch in range(3):
        land(batch)
        ws.coordinator.inject()
    code, out = command(ws, "process", ws.job.name, faults="epoch.compute@3=kill")
    assert code == -9, out[-4000:]
    assert ws.store.latest_completed(ws.job.name) is None
