"""What the checkpoint lifecycle knows of a job: its graph, keyed state, sinks and policies.

A job is declared with the public API (``absreplay.api``) and found by
``coordinator.dataflow.discovery``; ``absreplay.api.Job.definition()`` makes this
definition of it. The declaration itself rides along as ``spec``, for the Spark
runtime (``spark_jobs.operators.dataflow``); nothing here reads it. No Spark here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from typing import Any

import pyarrow as pa

from coordinator.dataflow.graph import ExecutionGraph, JobGraph, OperatorKind
from coordinator.dataflow.iterate import loop_of
from coordinator.checkpoints.policy import CheckpointPolicy, IdStorePolicy
from coordinator.sources.record_formats import RecordFormat, TextLines
from coordinator.sinks.base import SinkTarget
from coordinator.sinks.declarations import SinkDeclaration
from coordinator.errors import UsageError
from coordinator.types import Schema, arrow_schema


@dataclass(frozen=True)
class StateSpec:
    """The keyed state of one stateful operator."""

    operator: str
    kind: OperatorKind  # one of ``graph.KEYED_KINDS`` or ITERATE
    #: its columns, ``updated`` last (None: known only when Spark runs the job, a join's)
    columns: Schema | None
    #: a row's identity: a restore keeps the newest version per identity
    identity: tuple[str, ...]
    #: the operator's key: what routes a row to a subtask (key groups)
    key: tuple[str, ...]
    #: False: rows are deleted (windows fire, joined records leave), so every snapshot is full
    incremental: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", OperatorKind(self.kind))


@dataclass(frozen=True)
class SinkSpec:
    """One sink of a job: its operator's name, its target, the columns it receives (key first for an
    upsert sink), and the operator whose output it takes."""

    name: str
    declaration: SinkDeclaration
    columns: Schema
    #: the upsert key's columns, first among ``columns`` (None: an append sink)
    key: tuple[str, ...] | None
    input: str = ""
    #: the input's changed state rows are the output: staged as the state snapshot's own files
    from_state: bool = True

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.columns)

    @property
    def arrow_schema(self) -> pa.Schema:
        return arrow_schema(self.columns)

    def target(self, catalog_url: str) -> SinkTarget:
        return self.declaration.target(self.arrow_schema, self.key, catalog_url)


#: the longest job, source, operator or sink name: the catalog's name columns are VARCHAR(64)
NAME_MAX = 64
NAME_RULE = f"letters, digits, _ and -, starting with a letter or digit, at most {NAME_MAX} characters"
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,{NAME_MAX - 1}}}")


def check_name(name: object, what: str) -> None:
    """ValueError naming ``name``, what it was declared as and the rule, unless it keeps to the rule.
    A name becomes a path (``$ABS_DATA_DIR/<job>/input/``, state files, the job's lease), where
    ``../`` or ``/`` would leave the directory meant, and a key of the catalog's name columns."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise ValueError(f"{what} name {name!r} must be {NAME_RULE}")


def check_dead_letter_share(job: str, share: float | None) -> None:
    """ValueError unless ``share`` is None or a share of records, 0 to 1: any other threshold is a typo
    that would pass or fail every epoch alike."""
    if share is not None and not 0 <= share <= 1:
        raise ValueError(f"job {job!r}: max_dead_letter_share must be between 0 and 1, got {share!r}")


def check_parallelism(job: str, parallelism: int, max_parallelism: int) -> None:
    """UsageError (exit 2) unless 1 <= parallelism <= the job's max_parallelism (the number of key
    groups its state is split into: ``coordinator.checkpoints.rescale``)."""
    if parallelism < 1:
        raise UsageError(f"job {job!r}: parallelism must be >= 1, not {parallelism}")
    if parallelism > max_parallelism:
        raise UsageError(
            f"job {job!r}: parallelism {parallelism} is above its max_parallelism {max_parallelism} "
            f"(the number of key groups its state is split into, fixed for the job's life); use at most "
            f"{max_parallelism}"
        )


@dataclass(frozen=True)
class JobDefinition:
    name: str
    description: str
    graph: JobGraph
    #: every stateful operator's keyed state, in topological order
    states: tuple[StateSpec, ...]
    sinks: tuple[SinkSpec, ...]
    #: (name, record format) of every source; with several, partitions are ``<source>/<partition>``
    sources: tuple[tuple[str, RecordFormat], ...] = (("source", TextLines()),)
    policy: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    barrier_interval_minutes: int = 5
    # how records of `.jsonl` segments (explicit ids) are deduplicated
    id_store: IdStorePolicy = field(default_factory=IdStorePolicy)
    # jobs with an iterate loop: rounds per epoch; what still circulates then is the back-edge log
    loop_rounds: int = 4
    #: "exactly_once" (aligned ABS) or "weak" (``coordinator.checkpoints.weak``: opt-in, loses records on failure)
    consistency: str = "exactly_once"
    #: an inject whose new records hold a larger share of dead letters fails (exit 1); None: no limit
    max_dead_letter_share: float | None = None
    #: the declaration (``absreplay.api.Job``) the Spark runtime runs; where it was found
    spec: Any = field(default=None, compare=False, repr=False)
    origin: str = ""
    #: per operator, what shapes its output besides its state: a window's size, a function's code digest
    #: (``coordinator.dataflow.code_digest``), aggregates, TTLs; plain JSON data, part of the job's version
    params: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_name(self.name, "job")  # the declaration checked it; a job renamed since is caught here
        for op in self.graph.operators:
            check_name(op.name, f"job {self.name!r}: operator")
        if self.loop_rounds < 1:
            raise ValueError(f"job {self.name!r}: loop_rounds must be >= 1, got {self.loop_rounds}")
        if self.consistency not in ("exactly_once", "weak"):
            raise ValueError(f"job {self.name!r}: consistency must be 'exactly_once' or 'weak', "
                             f"not {self.consistency!r}")
        if self.consistency == "weak" and self.loop_tail is not None:
            raise ValueError(f"job {self.name!r}: consistency='weak' is for acyclic jobs; a loop's back-edge "
                             f"log needs aligned checkpoints")
        check_dead_letter_share(self.name, self.max_dead_letter_share)

    @property
    def state_operator(self) -> str:
        """The first stateful operator: whose acks say the parallelism a checkpoint was taken at."""
        return self.states[0].operator

    def state(self, operator: str) -> StateSpec:
        return next(st for st in self.states if st.operator == operator)

    @property
    def lines(self) -> RecordFormat:
        """The record format of a single-source job."""
        return self.sources[0][1]

    def format_of(self, partition: str) -> RecordFormat:
        """The record format of a partition's segments (``<source>/<partition>`` with several sources)."""
        return dict(self.sources)[self.source_of(partition)]

    def source_of(self, partition: str) -> str:
        """The name of the source a partition belongs to (``<source>/<partition>`` with several sources)."""
        return self.sources[0][0] if len(self.sources) == 1 else partition.split("/", 1)[0]

    @property
    def source_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.sources)

    @property
    def sink_operators(self) -> tuple[str, ...]:
        return tuple(sink.name for sink in self.sinks)

    @property
    def execution_graph(self) -> ExecutionGraph:
        return self.graph.to_execution_graph()

    @property
    def loop_tail(self) -> str | None:
        """The operator whose back-edge log is part of every checkpoint (None: the graph is acyclic)."""
        back_edge = loop_of(self.graph)
        return back_edge.source if back_edge else None

    @property
    def parallelism(self) -> int:
        return self.graph.operator(self.state_operator).parallelism

    def with_parallelism(self, parallelism: int) -> JobDefinition:
        """The same job with every operator at ``parallelism``: what a run at another parallelism
        runs (its keyed state is redistributed by key groups on restore)."""
        if parallelism < 1:
            raise ValueError(f"job {self.name!r}: parallelism must be >= 1, got {parallelism}")
        operators = tuple(replace(op, parallelism=parallelism) for op in self.graph.operators)
        return replace(self, graph=replace(self.graph, operators=operators))
