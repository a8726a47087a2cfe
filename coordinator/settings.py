"""Settings from the environment, with embedded defaults under ``.absreplay/``.

ABS_DATABASE_URL  catalog (default: SQLite file .absreplay/catalog.db)
ABS_DATA_DIR      sources: <dir>/<job>/input/<partition>/<segment files> (a local path, s3a:// or hdfs://)
ABS_STATE_URI     state root (local path or Hadoop-compatible URI)
ABS_SPARK_MASTER  Spark master (default local[*])
ABS_HOME          where the defaults live (default ./.absreplay)
ABS_PARALLELISM   parallelism of processing runs (default: the job's own, 2 for the reference jobs)
ABS_JOBS_DIR      a folder of job files (``coordinator.dataflow.discovery``; default: none)
ABS_STATE_BACKEND local (keyed aggregates on local stores, ``spark_jobs.state.stores.provider``) or spark
ABS_STORE_DIR     where the local stores live on each host (default: absreplay-stores in each executor's local dir)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from coordinator.catalog.db import parse_url
from coordinator.errors import ConfigError
from coordinator.storage import location
from coordinator.storage.location import Location


STATE_BACKENDS = ("local", "spark")


def _choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"{name}={value!r}: expected one of {', '.join(choices)}")
    return value


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str
    #: a local folder, or a Location on an object store or HDFS
    data_dir: Path | Location
    state_uri: str
    spark_master: str
    #: parallelism of processing runs unless one asks for another (None: the job's own)
    parallelism: int | None = None
    #: a folder of job files ("": none)
    jobs_dir: str = ""
    #: local | spark (``spark_jobs.state.stores.provider``)
    state_backend: str = "local"
    #: the local stores' folder ("": beside the state)
    store_dir: str = ""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(current_environ() if env is None else env)
        home = Path(env.get("ABS_HOME") or ".absreplay").expanduser().resolve()
        url = env.get("ABS_DATABASE_URL") or f"sqlite:///{home / 'catalog.db'}"
        parse_url(url)  # fail early, with a one-line message, on a malformed URL
        return cls(
            home=home,
            database_url=url,
            data_dir=location.at(env.get("ABS_DATA_DIR") or home / "data"),
            state_uri=env.get("ABS_STATE_URI") or str(home / "state"),
            spark_master=env.get("ABS_SPARK_MASTER") or "local[*]",
            parallelism=_parallelism(env.get("ABS_PARALLELISM") or None),
            jobs_dir=env.get("ABS_JOBS_DIR") or "",
            state_backend=_choice("ABS_STATE_BACKEND", env.get("ABS_STATE_BACKEND") or "local", STATE_BACKENDS),
            store_dir=env.get("ABS_STORE_DIR") or "",
        )

    def as_env(self) -> dict[str, str]:
        return {
            "ABS_HOME": str(self.home),
            "ABS_DATABASE_URL": self.database_url,
            "ABS_DATA_DIR": str(self.data_dir),
            "ABS_STATE_URI": self.state_uri,
            "ABS_SPARK_MASTER": self.spark_master,
            # empty: unset (the driver reads it like the other settings)
            "ABS_PARALLELISM": str(self.parallelism or ""),
            "ABS_JOBS_DIR": self.jobs_dir,
            "ABS_STATE_BACKEND": self.state_backend,
            "ABS_STORE_DIR": self.store_dir,
        }


def current_environ() -> dict[str, str]:
    """A copy of the environment that tolerates another thread changing it meanwhile: ``dict(os.environ)``
    raised KeyError when a library removed a variable it had set around an import (Airflow's
    ``PYDANTIC_DISABLE_PLUGINS``) between listing the keys and reading them."""
    found = {}
    for key in list(os.environ):
        value = os.environ.get(key)
        if value is not None:
            found[key] = value
    return found


def _parallelism(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        parallelism = int(value)
    except ValueError:
        parallelism = 0
    if parallelism < 1:
        raise ConfigError(f"ABS_PARALLELISM must be a whole number >= 1, not {value!r}")
    return parallelism
