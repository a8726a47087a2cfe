"""Where a sink's output is, as one URI that names the data and nothing else (no credentials).

The URI is the sink's identity outside ABS Replay: the Airflow asset its commits are published
to (``absreplay.airflow.orchestration``), in the forms Airflow's providers normalize to, so an
``Asset(uri)`` written by hand in a downstream DAG is the same asset:

- a SQL table in PostgreSQL: ``postgres://HOST:PORT/DATABASE/SCHEMA/TABLE`` (the postgres
  provider's form; port 5432 and schema ``public`` when the URL does not say);
- in MySQL or MariaDB: ``mysql://HOST:PORT/DATABASE/TABLE`` (the mysql provider's form);
- in SQLite: ``sqlite:/ABSOLUTE/PATH/OF/FILE.db/TABLE`` (no ``//``: Airflow's normal form);
  in any other database: ``BACKEND://HOST:PORT/DATABASE/TABLE``;
- a Parquet directory or a local Delta table: ``file:///ABSOLUTE/PATH``; a remote Delta table:
  its own URI (``s3://bucket/path``, ``abfss://container@account.dfs.core.windows.net/path``).

User names and passwords are never part of it (a remote location's ``user:password@`` is
dropped; a bare ``container@`` that names the data, as in ``abfss://``, stays), nor are query
strings: they say how to connect, not what the data is. A relative path is made absolute
against the working directory, as the target itself resolves it where the commit runs.

Every location a job declares (a sink's path, URI or database URL, a Delta source's table) may name
environment variables, ``${NAME}`` or ``${NAME:-default}``, read by ``expand`` when the location is
used, not when the job file is imported.
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote, urlsplit, urlunsplit

from sqlalchemy.engine import make_url

from coordinator.errors import ConfigError

#: default ports, as the providers' normalizers fill them in
_PORTS = {"postgres": 5432, "mysql": 3306}
#: SQLAlchemy backend name -> the scheme Airflow's providers use
_SCHEMES = {"postgresql": "postgres", "mysql": "mysql", "mariadb": "mysql"}
#: a ``${NAME}`` or ``${NAME:-default}`` holding no other one: defaults may name variables too
_INNERMOST = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^${}]*))?\}")


def expand(text: str, what: str = "sink location") -> str:
    """``text`` with ``${NAME}`` / ``${NAME:-default}`` replaced from the environment (ConfigError, exit 2,
    for a variable that is unset and has no default; ``what`` names the location in its message)."""
    while True:
        m = _INNERMOST.search(text)
        if m is None:
            return text
        name, default = m.group(1), m.group(2)
        value = os.environ.get(name) or default
        if value is None:
            raise ConfigError(f"{what} {text!r} names ${{{name}}}, which is not set")
        text = text[:m.start()] + value + text[m.end():]


def sql_table_uri(database_url: str, table: str) -> str:
    """The URI of ``table`` in the database of the SQLAlchemy URL ``database_url`` (its user,
    password, driver and query are left out)."""
    url = make_url(database_url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        database = url.database or ":memory:"
        path = "/:memory:" if database == ":memory:" else os.path.abspath(database)
        # no authority: Airflow normalizes ``sqlite:///path`` to ``sqlite:/path`` (urlunsplit)
        return f"sqlite:{_path(path)}/{_segment(table)}"
    scheme = _SCHEMES.get(backend, backend)
    host = (url.host or "localhost").lower()
    port = url.port or _PORTS.get(scheme)
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{port}" if port else ""
    parts = [url.database or "", *(["public"] if scheme == "postgres" else []), table]
    return f"{scheme}://{netloc}/" + "/".join(_segment(p) for p in parts)


def storage_uri(location: str) -> str:
    """The URI of a file or object-store location: a local path (or ``file:`` URI) as
    ``file:///ABSOLUTE/PATH``, a remote URI without its credentials, query or trailing slash."""
    parts = urlsplit(location)
    if len(parts.scheme) <= 1:  # a local path (one letter: a Windows drive)
        return "file://" + _path(os.path.abspath(location))
    scheme = parts.scheme.lower()
    if scheme == "file":
        return "file://" + _path(os.path.abspath(parts.path))
    userinfo, at, host = parts.netloc.rpartition("@")
    if at and ":" in userinfo:  # user:password: credentials, not a name of the data
        userinfo, at = "", ""
    netloc = f"{userinfo}{at}{host}"
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), "", ""))


def _path(path: str) -> str:
    return quote(path.rstrip("/") or "/", safe="/:")


def _segment(name: str) -> str:
    return quote(name, safe="")
