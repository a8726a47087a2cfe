"""A pyarrow filesystem and path for any URI a job may name: what the coordinator lists, reads and deletes,
and what executors' Python writes and loads.

- a local path, or ``file://``: pyarrow's local filesystem;
- ``s3a://bucket/key`` (and ``s3://``): pyarrow's S3 client, configured from the S3A properties Spark
  reads (``hadoop_conf``), so both sides reach the same endpoint as the same user. Without explicit keys
  there, the AWS SDK's default chain answers (environment, profile, instance or container role), as S3A's
  default providers do;
- ``hdfs://namenode[:port]/path``: the hdfs-native client (HDFS's RPC protocol in Rust: no JVM and no
  libhdfs, which Spark's pip package does not ship), through pyarrow's fsspec adapter; a nameservice is
  resolved from ``hdfs-site.xml`` in ``HADOOP_CONF_DIR`` as Hadoop's client resolves it.

Filesystems are cached per bucket or namenode: each one holds a connection pool.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from coordinator.errors import ConfigError
from coordinator.storage import hadoop_conf

S3_SCHEMES = ("s3a", "s3")
HDFS_SCHEMES = ("hdfs",)


def scheme(uri: str) -> str:
    """``s3a``, ``hdfs``, ... or ``file`` for a local path."""
    return urlsplit(uri).scheme.lower() if "://" in uri else "file"


def is_object_store(uri: str) -> bool:
    """Whether objects at ``uri`` are whole or absent, with no rename (an S3 store)."""
    return scheme(uri) in S3_SCHEMES


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding ``uri`` and the path within it."""
    kind = scheme(uri)
    if kind == "file":
        return pafs.LocalFileSystem(), uri[len("file://"):] if uri.startswith("file://") else uri
    parts = urlsplit(uri)
    if kind in S3_SCHEMES:
        if not parts.netloc:
            raise ConfigError(f"{uri} names no bucket: expected s3a://<bucket>/<prefix>")
        return _s3(parts.netloc, _s3_key(hadoop_conf.s3a_properties(), parts.netloc)), \
            f"{parts.netloc}{parts.path}".rstrip("/")
    if kind in HDFS_SCHEMES:
        return _hdfs(parts.netloc), (parts.path or "/").rstrip("/") or "/"
    raise ConfigError(f"{uri}: the scheme {kind}:// is not supported (a local path, s3a:// or hdfs://)")


def _s3_key(properties: dict[str, str], bucket: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(hadoop_conf.for_bucket(properties, bucket).items()))


@lru_cache(maxsize=32)
def _s3(bucket: str, settings: tuple[tuple[str, str], ...]) -> pafs.S3FileSystem:
    conf = dict(settings)
    # S3A sends no checksum of its own unless asked (many S3-compatible stores refuse the SDK's); pyarrow's
    # SDK reads its choice from the environment
    if conf.get("checksum.generation", "false").lower() != "true":
        os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
        os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")
    # an object written whole in one PUT (not a multipart upload of three requests) when it is small
    kwargs: dict[str, object] = {"allow_delayed_open": True}
    endpoint = conf.get("endpoint", "").strip()
    ssl = conf.get("connection.ssl.enabled", "true").lower() != "false"
    if endpoint:
        if "://" in endpoint:
            split = urlsplit(endpoint)
            ssl, endpoint = split.scheme == "https", split.netloc
        kwargs["endpoint_override"] = endpoint
        kwargs["scheme"] = "https" if ssl else "http"
        kwargs["force_virtual_addressing"] = conf.get("path.style.access", "false").lower() != "true"
    region = conf.get("endpoint.region") or conf.get("region") or os.environ.get("AWS_REGION")
    if region:
        kwargs["region"] = region
    if conf.get("access.key") or conf.get("secret.key"):
        if not (conf.get("access.key") and conf.get("secret.key")):
            raise ConfigError(f"bucket {bucket}: fs.s3a.access.key and fs.s3a.secret.key must be set together")
        kwargs.update(access_key=conf["access.key"], secret_key=conf["secret.key"],
                      session_token=conf.get("session.token") or None)
    elif "AnonymousAWSCredentialsProvider" in conf.get("aws.credentials.provider", ""):
        kwargs["anonymous"] = True
    return pafs.S3FileSystem(**kwargs)


@lru_cache(maxsize=8)
def _hdfs(authority: str) -> pafs.FileSystem:
    from hdfs_native.fsspec import HdfsFileSystem

    host, _, port = authority.partition(":")
    try:
        fs = HdfsFileSystem(host=host or None, port=int(port) if port else None)
    except (RuntimeError, ValueError) as exc:
        raise ConfigError(f"hdfs://{authority}: cannot reach its namenode ({exc})") from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))


def hdfs_client(uri: str):
    """The fsspec filesystem under ``uri``'s pyarrow one (what knows an HDFS file's modification time)."""
    return _hdfs(urlsplit(uri).netloc).handler.fs


def local_path(uri: str) -> Path | None:
    """``uri`` as a local path, or None when it is elsewhere."""
    return Path(uri[len("file://"):] if uri.startswith("file://") else uri) if scheme(uri) == "file" else None


def files_under(fs: pafs.FileSystem, root: str, recursive: bool = True) -> list[pafs.FileInfo]:
    """The files under folder ``root`` (none when it is missing: no request more to ask), in no set order.
    A key that is also a folder is a folder marker, not a file (some S3-compatible stores list a folder's
    own key beside what is under it)."""
    found = fs.get_file_info(pafs.FileSelector(root, recursive=recursive, allow_not_found=True))
    folders = {f.path for f in found if f.type == pafs.FileType.Directory}
    return [f for f in found if f.type == pafs.FileType.File and f.path not in folders]


def write_whole(uri: str, write: Callable[[pafs.FileSystem, str], None]) -> None:
    """The file at ``uri`` written whole or not at all by ``write(fs, path)``: on an object store straight to
    its final name (one PUT: an object is whole or absent, and there is no rename); elsewhere a hidden
    temporary file beside it, renamed into place (over an earlier one: HDFS renames onto no file, so that one
    goes first)."""
    fs, path = filesystem(uri)
    if is_object_store(uri):
        write(fs, path)
        return
    folder, name = path.rsplit("/", 1)
    fs.create_dir(folder, recursive=True)
    tmp = f"{folder}/.{name}.tmp"
    write(fs, tmp)
    if not isinstance(fs, pafs.LocalFileSystem) and fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_file(path)
    fs.move(tmp, path)


def delete_tree(uri: str) -> None:
    """Delete the folder at ``uri`` and everything under it; one already gone is fine. On an S3 store with
    S3A's bulk delete switched off (``fs.s3a.multiobjectdelete.enable=false``: the store refuses
    DeleteObjects), object by object, as S3A then deletes."""
    fs, path = filesystem(uri)
    if is_object_store(uri):
        bucket = urlsplit(uri).netloc
        conf = hadoop_conf.for_bucket(hadoop_conf.s3a_properties(), bucket)
        if conf.get("multiobjectdelete.enable", "true").lower() == "false":
            for f in files_under(fs, path):
                try:
                    fs.delete_file(f.path)
                except FileNotFoundError:
                    pass
            return
    try:
        if fs.get_file_info(path).type != pafs.FileType.NotFound:
            fs.delete_dir(path)
    except FileNotFoundError:
        pass


def delta_storage_options(uri: str) -> dict[str, str] | None:
    """delta-rs' storage options for a table at ``uri`` on an S3 store, from the same S3A properties (None
    elsewhere, or with none configured: delta-rs then reads the AWS environment itself). The coordinator is
    a Delta sink's one writer, under its lease, so delta-rs may commit with S3's copy and delete instead of
    a locking service (``AWS_S3_ALLOW_UNSAFE_RENAME``)."""
    if not is_object_store(uri):
        return None
    conf = hadoop_conf.for_bucket(hadoop_conf.s3a_properties(), urlsplit(uri).netloc)
    options = {"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    endpoint = conf.get("endpoint", "").strip()
    if endpoint:
        ssl = conf.get("connection.ssl.enabled", "true").lower() != "false"
        endpoint = endpoint if "://" in endpoint else f"{'https' if ssl else 'http'}://{endpoint}"
        options["AWS_ENDPOINT_URL"] = endpoint
        options["AWS_ALLOW_HTTP"] = str(endpoint.startswith("http://")).lower()
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(conf.get("path.style.access", "false").lower() != "true").lower()
    if region := conf.get("endpoint.region") or conf.get("region"):
        options["AWS_REGION"] = region
    for key, name in (("access.key", "AWS_ACCESS_KEY_ID"), ("secret.key", "AWS_SECRET_ACCESS_KEY"),
                      ("session.token", "AWS_SESSION_TOKEN")):
        if conf.get(key):
            options[name] = conf[key]
    return options
