"""Where a run's time goes: its Spark jobs, stages and tasks, and its catalog round trips.

    with RunProfile(spark, engine) as profile:
        ...                                  # the measured run(s), in this process
    profile.breakdown(epochs=5)              # per epoch: jobs, stages, tasks, shuffle, executor times, catalog

Spark's own status store (what the UI shows, kept whether or not the UI is on) is read through the
driver's JVM for the stages that completed inside the block: their count, tasks, shuffle bytes, and
the executors' time split into run time (of which JVM GC), deserialization and result serialization.
The stages are also summed by what they ran (their name: the call site that started them), the
longest first. Python worker start is not a Spark metric: a stage running Python (an Arrow UDF, the
stores' tasks) shows it as executor run time beyond what the task itself measured. A SQLAlchemy
event counts the catalog's statements and their seconds. The rest of the wall time is the driver's:
planning, py4j, waiting on the snapshot thread.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict

from sqlalchemy import event
from sqlalchemy.engine import Engine


class RunProfile:
    def __init__(self, spark, engine: Engine) -> None:
        self.spark, self.engine = spark, engine
        self.statements, self.catalog_s = 0, 0.0
        self._started: dict[int, float] = {}
        self._stages_before: set[int] = set()
        self.wall_s = 0.0
        self.stages: list[dict] = []
        self.jobs = 0

    # -- the catalog's statements ------------------------------------------------------------------
    def _before(self, conn, cursor, statement, parameters, context, executemany) -> None:  # noqa: ANN001
        self._started[id(cursor)] = time.perf_counter()

    def _after(self, conn, cursor, statement, parameters, context, executemany) -> None:  # noqa: ANN001
        started = self._started.pop(id(cursor), None)
        if started is not None:
            self.statements += 1
            self.catalog_s += time.perf_counter() - started

    # -- Spark's status store ----------------------------------------------------------------------
    def _status(self):
        return self.spark.sparkContext._jsc.sc().statusStore()

    def _stages(self):
        """Every stage Spark keeps (``AppStatusStore.stageList``, its Scala defaults spelled out for py4j)."""
        st = self._status()
        return st.stageList(None, False, False, getattr(st, "stageList$default$4")(),
                            getattr(st, "stageList$default$5")())

    def _stage_ids(self) -> set[int]:
        stages = self._stages()
        return {int(stages.apply(i).stageId()) for i in range(stages.size())}

    def _job_ids(self) -> set[int]:
        jobs = self._status().jobsList(None)
        return {int(jobs.apply(i).jobId()) for i in range(jobs.size())}

    def __enter__(self) -> RunProfile:
        event.listen(self.engine, "before_cursor_execute", self._before)
        event.listen(self.engine, "after_cursor_execute", self._after)
        self._stages_before, self._jobs_before = self._stage_ids(), self._job_ids()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self._t0
        event.remove(self.engine, "before_cursor_execute", self._before)
        event.remove(self.engine, "after_cursor_execute", self._after)
        self.jobs = len(self._job_ids() - self._jobs_before)
        stages = self._stages()
        for i in range(stages.size()):
            s = stages.apply(i)
            if int(s.stageId()) in self._stages_before:
                continue
            self.stages.append({
                "name": _call_site(str(s.name())), "tasks": int(s.numTasks()),
                "run_s": int(s.executorRunTime()) / 1e3, "gc_s": int(s.jvmGcTime()) / 1e3,
                "deserialize_s": int(s.executorDeserializeTime()) / 1e3,
                "serialize_s": int(s.resultSerializationTime()) / 1e3,
                "shuffle_read_mb": int(s.shuffleReadBytes()) / 2**20,
                "shuffle_write_mb": int(s.shuffleWriteBytes()) / 2**20,
                "wall_s": _stage_wall_s(s),
            })

    def breakdown(self, epochs: int) -> dict:
        """Per epoch (the block's totals over ``epochs``): what the driver waited on, and why."""
        per = max(epochs, 1)
        totals: dict[str, float] = defaultdict(float)
        by_name: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for s in self.stages:
            for k in ("tasks", "run_s", "gc_s", "deserialize_s", "serialize_s", "shuffle_read_mb",
                      "shuffle_write_mb", "wall_s"):
                totals[k] += s[k]
            by_name[s["name"]]["stages"] += 1
            by_name[s["name"]]["wall_s"] += s["wall_s"]
            by_name[s["name"]]["run_s"] += s["run_s"]
        top = sorted(by_name.items(), key=lambda kv: -kv[1]["wall_s"])[:8]
        return {
            "wall_s": self.wall_s / per,
            "spark_jobs": self.jobs / per,
            "stages": len(self.stages) / per,
            **{k: v / per for k, v in totals.items()},
            "stages_wall_s": totals["wall_s"] / per,
            "catalog_statements": self.statements / per,
            "catalog_s": self.catalog_s / per,
            # stages may overlap (the snapshot thread's with the next epoch's): then this is an underestimate
            "driver_other_s": max(0.0, self.wall_s - totals["wall_s"] - self.catalog_s) / per,
            "by_stage": {name: {k: v / per for k, v in d.items()} for name, d in top},
        }


def _call_site(name: str) -> str:
    """A stage's name without its line numbers' noise: ``mapInArrow at provider.py:320`` -> ``mapInArrow at provider.py``."""
    return re.sub(r":\d+$", "", name.strip())


def _stage_wall_s(stage) -> float:  # noqa: ANN001 - a py4j StageData
    submitted, completed = stage.submissionTime(), stage.completionTime()
    if submitted.isEmpty() or completed.isEmpty():
        return 0.0
    return (completed.get().getTime() - submitted.get().getTime()) / 1e3


def print_breakdown(console, title: str, b: dict) -> None:  # noqa: ANN001 - a rich Console
    """The breakdown as two short tables: the epoch's totals, then its stages by what they ran."""
    from rich.table import Table

    t = Table(title=title)
    for col in ("wall s", "Spark jobs", "stages", "tasks", "stages' wall s", "executor run s (GC)",
                "deserialize s", "shuffle MB r/w", "catalog stmts (s)", "driver other s"):
        t.add_column(col)
    t.add_row(f"{b['wall_s']:.2f}", f"{b['spark_jobs']:.1f}", f"{b['stages']:.1f}", f"{b.get('tasks', 0):.0f}",
              f"{b['stages_wall_s']:.2f}", f"{b.get('run_s', 0):.2f} ({b.get('gc_s', 0):.2f})",
              f"{b.get('deserialize_s', 0):.2f}",
              f"{b.get('shuffle_read_mb', 0):.1f}/{b.get('shuffle_write_mb', 0):.1f}",
              f"{b['catalog_statements']:.0f} ({b['catalog_s']:.2f})", f"{b['driver_other_s']:.2f}")
    console.print(t)
    s = Table(title="stages per epoch, by what they ran (longest first)")
    for col in ("stage", "count", "wall s", "executor run s"):
        s.add_column(col)
    for name, d in b["by_stage"].items():
        s.add_row(name, f"{d['stages']:.1f}", f"{d['wall_s']:.2f}", f"{d['run_s']:.2f}")
    console.print(s)
