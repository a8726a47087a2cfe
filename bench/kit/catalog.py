"""A benchmark's wordcount job on a catalog of its own: migrated, registered, with its coordinator."""

from __future__ import annotations

from absreplay_examples.definitions import wordcount
from coordinator.catalog.db import make_engine, upgrade
from coordinator.checkpoints.coordinator import CheckpointCoordinator
from coordinator.checkpoints.store import CheckpointStore
from coordinator.dataflow.jobs import JobDefinition
from coordinator.settings import Settings
from coordinator.sources import source


class WordcountCatalog:
    """``settings``' catalog migrated, and what a scenario drives: its store, the job (the wordcount example,
    or ``job``: another declaration of it, e.g. on a Kafka source), its coordinator and the job's input folder
    (a local path or a Location)."""

    def __init__(self, settings: Settings, job: JobDefinition | None = None) -> None:
        self.settings = settings
        upgrade(settings.database_url)
        self.engine = make_engine(settings.database_url)
        self.store = CheckpointStore(self.engine)
        self.job = job if job is not None else wordcount()
        self.coordinator = CheckpointCoordinator(self.store, self.job, settings.data_dir, settings.state_uri)
        self.input = source.input_dir(settings.data_dir, self.job.name)
