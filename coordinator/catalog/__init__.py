"""The SQL catalog: ORM models, engine set-up and migrations to head."""
