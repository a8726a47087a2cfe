"""Which of a job's sources are segment files, and which are read from elsewhere (a Delta table's versions,
Kafka's offsets), whose own modules check them: the one place that tells them apart for the file checks
(``coordinator.sources.segment_changes``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from coordinator.sources.delta_source import DeltaSource
from coordinator.sources.kafka_source import KafkaSource

if TYPE_CHECKING:
    from coordinator.dataflow.jobs import JobDefinition
    from coordinator.sources.segment_changes import Registered


def reads_files(fmt: object) -> bool:
    """Whether a source of format ``fmt`` is segment files."""
    return not isinstance(fmt, DeltaSource | KafkaSource)


def file_segments(job: JobDefinition, segments: Sequence[Registered]) -> list[Registered]:
    """The segments that are files: what ``segment_changes`` checks."""
    return [seg for seg in segments if reads_files(job.format_of(seg.partition))]
