"""The example jobs' definitions at a chosen parallelism (and loop rounds): what the tests and the
benchmarks run, as a user would get them from discovery."""

from __future__ import annotations

from dataclasses import replace

from coordinator.dataflow.jobs import JobDefinition


def wordcount(parallelism: int = 2) -> JobDefinition:
    from absreplay_examples.wordcount import job

    return job.definition("absreplay_examples.wordcount").with_parallelism(parallelism)


def connected_components(parallelism: int = 2, loop_rounds: int = 4) -> JobDefinition:
    from absreplay_examples.connected_components import job

    definition = job.definition("absreplay_examples.connected_components").with_parallelism(parallelism)
    return replace(definition, loop_rounds=loop_rounds)


def synthetic(parallelism: int = 2) -> JobDefinition:
    from absreplay_examples.synthetic import job

    return job.definition("absreplay_examples.synthetic").with_parallelism(parallelism)
