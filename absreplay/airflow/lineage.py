"""A processing run's lineage for OpenLineage: the job's sources in, its sinks out, with their schemas.

The epochs DAG's ``process_epochs`` task is a ``ProcessingRun`` (``processing_run``: a
SparkSubmitOperator that knows its job): when it succeeds, the OpenLineage provider's listener asks it for its lineage
(``get_openlineage_facets_on_complete``) and sends a COMPLETE event whose inputs are the job's
sources and whose outputs are its sinks, each with a schema facet, to the transport configured in
``[openlineage]`` (Marquez, a file, the console...). Lineage tools then draw source -> job -> sink.

Dataset names follow OpenLineage's naming conventions, taken from the same location a sink's Airflow
asset has (``SinkDeclaration.location``, never a password):

- PostgreSQL ``postgres://HOST:PORT/DATABASE/SCHEMA/TABLE``: namespace ``postgres://HOST:PORT``,
  name ``DATABASE.SCHEMA.TABLE`` (MySQL likewise, ``DATABASE.TABLE``);
- a local file or directory ``file:///PATH``: namespace ``file``, name ``/PATH``;
- SQLite ``sqlite:/PATH/FILE.db/TABLE``: namespace ``sqlite:/PATH/FILE.db``, name ``TABLE``;
- an object store ``s3://BUCKET/KEY``: namespace ``s3://BUCKET``, name ``KEY``;
- a Kafka topic: namespace ``kafka://HOST:PORT`` (the first bootstrap server), name the topic (a
  source's pattern where it has one).

A window's late records go to the catalog's ``dead_letters`` table: an output too. A source is the directory its segments are injected into (``$ABS_DATA_DIR/<job>/input[/<source>]``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from coordinator.dataflow.jobs import JobDefinition
from coordinator.settings import Settings
from coordinator.sources import source
from coordinator.sources.delta_source import DeltaSource
from coordinator.sources.kafka_source import KafkaSource
from coordinator.sources.record_formats import TextLines
from coordinator.types import Schema
from coordinator.sinks.locations import storage_uri


#: object stores and file systems: the bucket (or container, or name node) is the namespace
_STORAGE = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "wasbs", "hdfs"})


def dataset_name(uri: str) -> tuple[str, str]:
    """(namespace, name) of a location URI, by OpenLineage's naming conventions."""
    parts = urlsplit(uri)
    scheme, path = parts.scheme, unquote(parts.path)
    if scheme == "file":
        return "file", path
    if scheme == "sqlite":
        db, _, table = path.rpartition("/")
        return f"sqlite:{db}", table
    if scheme in _STORAGE or scheme == "kafka":
        return f"{scheme}://{parts.netloc}", path.lstrip("/")
    # a database (``SinkDeclaration.location``: postgres, mysql, other SQLAlchemy backends)
    return f"{scheme}://{parts.netloc}", ".".join(p for p in path.split("/") if p)


def _dataset(kind: type, uri: str, fields: Schema) -> Any:
    from openlineage.client.facet_v2 import schema_dataset

    namespace, name = dataset_name(uri)
    schema = schema_dataset.SchemaDatasetFacet(
        fields=[schema_dataset.SchemaDatasetFacetFields(name=c, type=t) for c, t in fields])
    return kind(namespace=namespace, name=name, facets={"schema": schema})


def _source_fields(fmt: Any) -> Schema:
    records = fmt.records if isinstance(fmt, KafkaSource) else fmt
    return (("line", "string"),) if isinstance(records, TextLines) else tuple(records.fields)


def _source_uris(fmt: Any, input_dir: str) -> list[str]:
    """Where a source's records are: a Delta table, Kafka topics, or the folder segments land in."""
    if isinstance(fmt, KafkaSource):
        server = fmt.servers.split(",")[0].strip()
        return [f"kafka://{server}/{topic}" for topic in fmt.topics or (fmt.pattern,)]
    return [storage_uri(fmt.location if isinstance(fmt, DeltaSource) else input_dir)]


def lineage(job: JobDefinition, settings: Settings) -> Any:
    """The job's ``OperatorLineage``: its sources as inputs, its sinks as outputs, with their schemas."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset

    root = source.input_dir(settings.data_dir, job.name)  # a local Path, or a Location on S3 or HDFS
    several = len(job.sources) > 1
    inputs = [_dataset(InputDataset, uri, _source_fields(fmt)) for name, fmt in job.sources
              for uri in _source_uris(fmt, str(root / name if several else root))]
    outputs = [_dataset(OutputDataset, sink.declaration.location(settings.database_url), sink.columns)
               for sink in job.sinks]
    return OperatorLineage(inputs=inputs, outputs=outputs)

