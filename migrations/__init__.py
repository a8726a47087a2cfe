"""Alembic migrations of the catalog (one history for SQLite and PostgreSQL)."""
