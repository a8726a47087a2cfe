"""Alembic environment: the URL comes from the config (set by coordinator.catalog.db) or ABS_DATABASE_URL."""

from __future__ import annotations

import os

from alembic import context

from coordinator.catalog.db import make_engine
from coordinator.catalog.models import Base

config = context.config
target_metadata = Base.metadata

# the audit views are created by the migrations, not the models; sink tables by their sinks
# (coordinator.sinks.sql_table), in the catalog database or elsewhere: neither is the models' business
def include_object(obj, name, type_, reflected, compare_to):
    if type_ == "table" and (name in ("snapshot_history", "checkpoint_stats", "operator_stats") or (reflected and compare_to is None)):
        return False
    return True


def url() -> str:
    return config.get_main_option("sqlalchemy.url") or os.environ["ABS_DATABASE_URL"]


def run_migrations_offline() -> None:
    context.configure(url=url(), target_metadata=target_metadata, literal_binds=True,
                      include_object=include_object, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(url())
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata,
                          include_object=include_object, render_as_batch=True,
                          compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
