"""The zip of the project's code that spark-submit ships to the driver and executors (``--py-files``).

A cluster-mode driver and every executor need the project's packages
importable, and the packages of the jobs installed as plugins (entry points,
``coordinator.dataflow.discovery``); the jobs folder's files are not packages: their
functions travel pickled by value (``spark_jobs.operators.dataflow``). The zip holds their ``.py`` files only, is
content-addressed (``absreplay-pyfiles-<sha256 prefix>.zip``) and byte-for-byte
reproducible, so a cache directory (``$ABS_HOME/pyfiles`` by default) holds one
zip per version of the code and a rebuild happens only when a source changes.
It is written under a temporary name and renamed, so concurrent builders never
expose a half-written file. A cache directory that cannot be written (a read-only
``ABS_HOME``) gives way to one under the temporary directory: the zip is a cache,
never a reason for a command to fail.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
import zipfile
from pathlib import Path

PACKAGES: tuple[str, ...] = ("absreplay", "coordinator", "spark_jobs")
PREFIX = "absreplay-pyfiles-"
# a fixed timestamp makes the zip reproducible (zip cannot store dates before 1980)
EPOCH = (1980, 1, 1, 0, 0, 0)
KEEP = 5


def package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {package!r} is not importable: install the project (pip install -e .)")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def sources(packages: tuple[str, ...] = PACKAGES) -> list[tuple[str, Path]]:
    """(name inside the zip, file on disk) of every module of ``packages``, sorted."""
    found = []
    for package in packages:
        root = package_dir(package)
        for path in root.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            found.append((f"{package}/{path.relative_to(root).as_posix()}", path))
    return sorted(found)


def digest(files: list[tuple[str, Path]]) -> str:
    h = hashlib.sha256()
    for name, path in files:
        h.update(name.encode())
        h.update(b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def shipped_packages() -> tuple[str, ...]:
    """The project's packages and those of every job found as a plugin."""
    from coordinator.dataflow.discovery import discover

    return tuple(sorted(set(PACKAGES) | discover().packages))


def build_pyfiles_zip(cache_dir: Path, packages: tuple[str, ...] | None = None) -> Path:
    """The zip of ``packages`` (default: ``shipped_packages()``) in ``cache_dir``, built if this
    version of the code has none yet; in a folder under the temporary directory where ``cache_dir``
    cannot be written."""
    files = sources(packages or shipped_packages())
    name = f"{PREFIX}{digest(files)[:16]}.zip"
    try:
        return _cached(cache_dir, name, files)
    except OSError:
        return _cached(Path(tempfile.gettempdir()) / f"absreplay-pyfiles-{os.getuid()}", name, files)


def _cached(cache_dir: Path, name: str, files: list[tuple[str, Path]]) -> Path:
    target = cache_dir / name
    if target.exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".building-", suffix=".zip", dir=cache_dir)
    try:
        with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
            for entry, path in files:
                info = zipfile.ZipInfo(entry, date_time=EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, path.read_bytes())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    prune(cache_dir, keep=target)
    return target


def prune(cache_dir: Path, keep: Path) -> None:
    """Drop all but the newest few zips: an application started a moment ago may still serve an older one."""
    zips = sorted(cache_dir.glob(f"{PREFIX}*.zip"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in zips[KEEP:]:
        if old != keep:
            old.unlink(missing_ok=True)
