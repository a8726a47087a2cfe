#!/bin/sh
# Runs once, on an empty data directory: the ABS Replay catalog database and its own role.
# Airflow's database and role come from POSTGRES_DB / POSTGRES_USER.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    --set=catalog_password="$ABS_CATALOG_PASSWORD" <<'SQL'
CREATE ROLE absreplay LOGIN PASSWORD :'catalog_password';
CREATE DATABASE absreplay OWNER absreplay;
SQL
