"""The Hadoop properties of the object store, read where Spark reads them.

A cluster configures S3A once, for Spark: ``fs.s3a.*`` in ``core-site.xml`` (in ``HADOOP_CONF_DIR``) and
``spark.hadoop.fs.s3a.*`` in ``spark-defaults.conf`` (in ``SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``), the
latter overriding the former as in Spark's Hadoop configuration. The coordinator reads the same files, so
that its listings and reads go to the same endpoint with the same credentials. Executors get the driver's
properties in ``ABS_S3A_SECRET_PROPERTIES`` (set by the Spark session, ``spark.executorEnv``): their hosts
need not hold the driver's configuration files. Secrets are never logged: only property names appear in errors.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from coordinator.errors import ConfigError

PREFIX = "fs.s3a."
SPARK_PREFIX = "spark.hadoop."
#: set by the driver for its executors: the properties as a JSON object. "SECRET" in the name makes Spark
#: redact its value wherever it shows its configuration (``spark.redaction.regex``): it may hold keys
EXECUTOR_ENV = "ABS_S3A_SECRET_PROPERTIES"
_DEFAULTS_LINE = re.compile(r"^\s*(\S+)\s*[=\s]\s*(.*?)\s*$")


def _read_once(parse):
    """``parse(path)`` of a configuration file, parsed again only when the file changes: every filesystem
    lookup asks (``filesystems.filesystem``)."""
    seen: dict[tuple[Path, int], dict[str, str]] = {}

    def read(path: Path | None) -> dict[str, str]:
        if path is None:
            return {}
        try:
            key = (path, path.stat().st_mtime_ns)
        except OSError:  # no such file: nothing configured there
            return {}
        if key not in seen:
            seen.clear()
            seen[key] = parse(path)
        return dict(seen[key])

    return read


def _core_site(env: Mapping[str, str]) -> dict[str, str]:
    folder = env.get("HADOOP_CONF_DIR")
    return _parse_core_site(Path(folder) / "core-site.xml" if folder else None)


def _spark_defaults(env: Mapping[str, str]) -> dict[str, str]:
    folder = env.get("SPARK_CONF_DIR") or (str(Path(env["SPARK_HOME"]) / "conf") if env.get("SPARK_HOME") else "")
    return _parse_spark_defaults(Path(folder) / "spark-defaults.conf" if folder else None)


@_read_once
def _parse_core_site(path: Path) -> dict[str, str]:
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise ConfigError(f"{path} is not valid XML: {exc}") from None
    found = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name and name.startswith(PREFIX) and value is not None:
            found[name.strip()] = value.strip()
    return found


@_read_once
def _parse_spark_defaults(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        m = _DEFAULTS_LINE.match(line)
        if m and not line.lstrip().startswith("#") and m.group(1).startswith(SPARK_PREFIX + PREFIX):
            found[m.group(1)[len(SPARK_PREFIX):]] = m.group(2)
    return found


def s3a_properties(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``fs.s3a.*`` properties in force: the driver's (``ABS_S3A_SECRET_PROPERTIES``) on an executor, else
    ``core-site.xml`` overridden by ``spark-defaults.conf``."""
    env = os.environ if env is None else env
    shipped = env.get(EXECUTOR_ENV)
    if shipped:
        try:
            return dict(json.loads(shipped))
        except ValueError:
            raise ConfigError(f"{EXECUTOR_ENV} is not a JSON object of fs.s3a.* properties") from None
    return {**_core_site(env), **_spark_defaults(env)}


def for_bucket(properties: Mapping[str, str], bucket: str) -> dict[str, str]:
    """S3A's per-bucket properties (``fs.s3a.bucket.<bucket>.<name>``) over the general ones, by ``<name>``."""
    general = {k[len(PREFIX):]: v for k, v in properties.items()
               if k.startswith(PREFIX) and not k.startswith(PREFIX + "bucket.")}
    own = f"{PREFIX}bucket.{bucket}."
    return {**general, **{k[len(own):]: v for k, v in properties.items() if k.startswith(own)}}


def ship(spark_confs: Mapping[str, str], env: dict[str, str] | None = None) -> str | None:
    """The properties in force for a Spark application whose configuration is ``spark_confs`` (its
    ``spark.hadoop.fs.s3a.*`` over the files'), set in ``env`` (this process's) so that the driver's own
    listings agree with its JVM; the JSON its executors get, or None when there is none."""
    env = os.environ if env is None else env
    properties = {**s3a_properties({k: v for k, v in env.items() if k != EXECUTOR_ENV}),
                  **{k[len(SPARK_PREFIX):]: v for k, v in spark_confs.items() if k.startswith(SPARK_PREFIX + PREFIX)}}
    if not properties:
        return None
    env[EXECUTOR_ENV] = json.dumps(properties, sort_keys=True)
    return env[EXECUTOR_ENV]
