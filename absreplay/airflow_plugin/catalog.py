"""The catalog the view reads: the Airflow Variable ``abs_database_url`` when set, else ``ABS_DATABASE_URL``.

The same rule as the DAGs' tasks (``absreplay.airflow.orchestration.resolve_settings``),
read in the api-server; one engine per catalog URL for the server's life.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import Engine

from absreplay.airflow.orchestration import resolve_settings
from absreplay.commands.context import DATABASE_URL_VARIABLE
from coordinator.catalog.db import make_engine


@lru_cache(maxsize=4)
def _engine(url: str) -> Engine:
    return make_engine(url)


def catalog_engine() -> Engine:
    from airflow.models.variable import Variable

    return _engine(resolve_settings(Variable.get(DATABASE_URL_VARIABLE, default_var=None)).database_url)
