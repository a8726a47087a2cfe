"""What every command needs: settings, a migrated catalog, the job and its coordinator."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.catalog.db import ensure_migrated, make_engine
from coordinator.checkpoints.coordinator import CheckpointCoordinator
from coordinator.errors import CatalogNotMigratedError
from coordinator.dataflow.discovery import get_job
from coordinator.dataflow.jobs import JobDefinition
from coordinator.settings import Settings
from coordinator.checkpoints.store import CheckpointStore

#: the Airflow Variable whose value is the catalog's URL for the DAG tasks and the view
DATABASE_URL_VARIABLE = "abs_database_url"


@dataclass
class JobContext:
    settings: Settings
    store: CheckpointStore
    job: JobDefinition
    coordinator: CheckpointCoordinator


def open_store(settings: Settings) -> CheckpointStore:
    engine = make_engine(settings.database_url)
    ensure_migrated(engine)
    return CheckpointStore(engine)


def open_store_if_migrated(settings: Settings) -> CheckpointStore | None:
    """The store, or None when the catalog is reachable but has no schema yet: a command that lists
    declarations works without one. A malformed URL or an unreachable database raises as in open_store."""
    try:
        return open_store(settings)
    except CatalogNotMigratedError:
        return None


def job_context(job_name: str, settings: Settings | None = None) -> JobContext:
    settings = settings or Settings.from_env()
    job = get_job(job_name)  # unknown job: exit 2 before touching the catalog
    store = open_store(settings)
    store.register_job(job)
    return JobContext(settings, store, job, CheckpointCoordinator(store, job, settings.data_dir, settings.state_uri))
