"""Named fault points, for tests and for rehearsing outages.

Arm them with ``ABS_FAULTS``, a comma-separated list of ``point[@checkpoint][/k]=action``
(``/k``: only the k-th time the point is reached for that checkpoint, e.g. after k acks):

    ABS_FAULTS="epoch.compute@3=kill"          SIGKILL the whole process group in epoch 3
    ABS_FAULTS="snapshot.after_ack@3/1=kill"   SIGKILL after 1 of checkpoint 3's task acks
    ABS_FAULTS="snapshot.before_ack=sleep:30"  pause 30 s after state is written, before acks
    ABS_FAULTS="finalize.before_commit=raise"  raise InjectedFault
    ABS_FAULTS="snapshot.before_ack@3=crash"   raise ProcessCrash (the process dying, in-process)

Actions: ``kill`` (SIGKILL to the process group: the Spark JVM dies too, like
a lost machine), ``sleep:<seconds>``, ``raise`` (an error the code handles like
any other), ``crash`` (a crash simulated inside this process, for tests that
share one SparkSession: nothing that handles errors catches it, and no later
step of the run writes anything; see ProcessCrash). A fault point announces
itself on stderr before acting, so a supervising test can see it was reached.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from coordinator.errors import AbsError

POINTS = frozenset(
    {
        "inject.after_cut",
        "epoch.compute",
        "snapshot.before_ack",
        "snapshot.after_ack",
        "finalize.before_commit",
        "sink.mid_commit",
        # a Kafka sink's commit, step by step (``coordinator.sinks.kafka_topic``)
        "kafka_sink.fenced",
        "kafka_sink.rows_sent",
        "kafka_sink.before_commit",
        "kafka_sink.after_commit",
        "gc.before_delete",
        "recovery.restore",
        "recovery.after_reset",
    }
)


class InjectedFault(AbsError):
    """Raised by a fault point armed with ``raise``."""


class ProcessCrash(BaseException):
    """The process dies here: raised by a fault point armed with ``crash``.

    A BaseException, so the handlers that turn errors into a failed checkpoint or a
    declined snapshot do not catch it (a dead process declines nothing); the
    snapshot writer stops writing and acking once it has seen one. What is left in
    the catalog and the state root is what a SIGKILL at that point leaves, except
    that context managers (the lease, open transactions) unwind, as they do when
    the process's connections and file locks die with it."""


def _armed(env: str) -> dict[tuple[str, int | None, int | None], str]:
    armed = {}
    for item in filter(None, (x.strip() for x in env.split(","))):
        spec, _, action = item.partition("=")
        spec, _, step = spec.partition("/")
        name, _, ck = spec.partition("@")
        if name not in POINTS:
            raise ValueError(f"ABS_FAULTS names unknown fault point {name!r}; known: {', '.join(sorted(POINTS))}")
        armed[(name, int(ck) if ck else None, int(step) if step else None)] = action
    return armed


def fault_point(name: str, checkpoint_id: int | None = None, step: int | None = None) -> None:
    env = os.environ.get("ABS_FAULTS")
    if not env:
        return
    armed = _armed(env)
    action = next(
        (armed[k] for k in ((name, checkpoint_id, step), (name, None, step), (name, checkpoint_id, None),
                            (name, None, None)) if k in armed),
        None,
    )
    if not action:
        return
    where = f"{name}@{checkpoint_id}" if checkpoint_id is not None else name
    where += f"/{step}" if step is not None else ""
    print(f"ABS fault point {where}: {action}", file=sys.stderr, flush=True)
    if action == "kill":
        os.killpg(os.getpgid(0), signal.SIGKILL)
    elif action.startswith("sleep:"):
        time.sleep(float(action.split(":", 1)[1]))
    elif action == "raise":
        raise InjectedFault(f"fault injected at {where}")
    elif action == "crash":
        raise ProcessCrash(f"simulated crash at {where}")
    else:
        raise ValueError(f"unknown fault action {action!r} at {where}")
