"""The catalog database: its schema, sessions and read model.

- ``models``: the ORM models (the schema; Alembic migrations mirror them);
- ``db``: engines, sessions, and migration of the schema to head;
- ``audit``: the read model the Airflow view and ``absreplay report`` share (read-only queries).
"""
