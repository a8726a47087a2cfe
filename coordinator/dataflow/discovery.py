"""Where jobs come from: installed packages and a jobs folder, the way Airflow reads its dags folder.

- Installed packages name their jobs in the ``absreplay.jobs`` entry-point group
  (``[project.entry-points."absreplay.jobs"] my_job = "my_package.jobs:job"``);
  an entry point may name a ``Job``, a module (its module-level ``Job`` objects
  count) or a function returning jobs.
- ``$ABS_JOBS_DIR`` (unset: none): every ``*.py`` file in it not starting with
  ``_`` is imported, and its module-level ``Job`` objects count.

A file or entry point that fails to import (whatever it raises), or declares an
incomplete job or a name already taken, is listed with its error (``absreplay
jobs``, the DAG files' warnings) and hides nothing else. Discovery runs once per
process and jobs folder.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from coordinator.dataflow.compile import build_definition
from coordinator.dataflow.declaration import JobDeclaration as Job
from coordinator.dataflow.jobs import JobDefinition, check_name
from coordinator.errors import ConfigError, UnknownJobError, UsageError

GROUP = "absreplay.jobs"
JOBS_DIR_ENV = "ABS_JOBS_DIR"
#: modules of the jobs folder are imported under this prefix
FOLDER_PACKAGE = "absreplay_jobs_dir"
#: ABS Replay's own packages (not its examples), whose frames a declaration's error never points at
OWN_PACKAGES = ("absreplay", "coordinator")


@dataclass(frozen=True)
class BrokenJob:
    origin: str
    error: str


@dataclass
class Found:
    jobs: dict[str, JobDefinition] = field(default_factory=dict)
    broken: list[BrokenJob] = field(default_factory=list)
    #: top-level packages of the jobs found through entry points (shipped to executors)
    packages: set[str] = field(default_factory=set)

    def add(self, origin: str, found: object) -> None:
        try:
            declared = [found] if isinstance(found, Job) else _as_jobs(found)
        except Exception as exc:  # noqa: BLE001 - what a plugin gives may fail as it is read, like its import
            self.broken.append(BrokenJob(origin, _one_line(exc)))
            return
        if declared is None:
            self.broken.append(BrokenJob(origin, f"it gives a {type(found).__name__}, not a Job, a module of "
                                                 "Jobs or a function returning Jobs"))
            return
        for job in declared:
            try:
                definition = build_definition(job, origin)
            except ValueError as exc:
                self.broken.append(BrokenJob(origin, str(exc)))
                continue
            except Exception as exc:  # noqa: BLE001 - a job its definition fails on must not hide the others
                self.broken.append(BrokenJob(origin, _one_line(exc)))
                continue
            if job.name in self.jobs:
                self.broken.append(BrokenJob(origin, f"job {job.name!r} is declared already by "
                                                     f"{self.jobs[job.name].origin}"))
                continue
            self.jobs[job.name] = definition


def _as_jobs(found: object) -> list[Job] | None:
    try:
        declared = list(found)  # type: ignore[call-overload]
    except TypeError:
        return None
    return declared if all(isinstance(job, Job) for job in declared) else None


def jobs_in(module: ModuleType) -> list[Job]:
    return [v for k, v in vars(module).items() if isinstance(v, Job) and not k.startswith("_")]


def _one_line(exc: BaseException) -> str:
    """``Type: first line (file, line N)``: the innermost frame of user code, not of the import
    machinery (``<frozen importlib...>``) nor of ABS Replay's API refusing a declaration (the job
    file's line declares it); a SyntaxError's own text names its file and line."""
    try:
        text = str(exc).strip()
    except Exception:  # noqa: BLE001 - an exception whose message fails is still listed, by its type
        text = ""
    first = text.splitlines()[0] if text else ""
    if isinstance(exc, SyntaxError):
        return f"{exc.__class__.__name__}: {first}"
    frames = [(frame.f_code.co_filename, line) for frame, line in traceback.walk_tb(exc.__traceback__)
              if not frame.f_code.co_filename.startswith("<")
              and str(frame.f_globals.get("__name__", "")).partition(".")[0] not in OWN_PACKAGES]
    where = f" ({Path(frames[-1][0]).name}, line {frames[-1][1]})" if frames else ""
    return f"{exc.__class__.__name__}{f': {first}' if first else ''}{where}"


def _from_entry_points(found: Found) -> None:
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        origin = f"entry point {ep.name} = {ep.value}"
        try:
            obj = ep.load()
            if isinstance(obj, ModuleType):
                obj = jobs_in(obj)
            elif callable(obj) and not isinstance(obj, Job):
                obj = obj()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - a broken plugin must not hide the others, sys.exit() too
            found.broken.append(BrokenJob(origin, _one_line(exc)))
            continue
        found.packages.add(ep.module.split(".")[0])
        found.add(origin, obj)


def import_job_file(path: Path) -> ModuleType:
    name = f"{FOLDER_PACKAGE}.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _from_folder(found: Found, folder: Path) -> None:
    if not folder.is_dir():
        found.broken.append(BrokenJob(str(folder), f"{JOBS_DIR_ENV}={folder} is not a directory"))
        return
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        try:
            module = import_job_file(path)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - a broken job file must not hide the others, sys.exit() too
            found.broken.append(BrokenJob(str(path), _one_line(exc)))
            continue
        found.add(str(path), jobs_in(module))


def jobs_folder() -> Path | None:
    """``$ABS_JOBS_DIR`` (None: unset), for a command that lists jobs: ConfigError (exit 2) when it
    names no directory. Discovery itself lists that as a broken origin instead, so the DAG files load."""
    folder = os.environ.get(JOBS_DIR_ENV, "")
    if not folder:
        return None
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise ConfigError(f"{JOBS_DIR_ENV}={folder} is not a directory: point it at the folder of your job files")
    return path


_FOUND: dict[str, Found] = {}


def discover() -> Found:
    """Every job found, and every broken job file or entry point (once per process and jobs folder)."""
    folder = os.environ.get(JOBS_DIR_ENV, "")
    if folder not in _FOUND:
        found = Found()
        _from_entry_points(found)
        if folder:
            _from_folder(found, Path(folder).expanduser())
        _FOUND[folder] = found
    return _FOUND[folder]


def get_job(name: str) -> JobDefinition:
    """The job called ``name`` (UnknownJobError, exit 2, listing the known and the broken ones). A name
    against the naming rule is bad input named as such, before any job file is imported: no job has it."""
    try:
        check_name(name, "job")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    found = discover()
    if name in found.jobs:
        return found.jobs[name]
    raise UnknownJobError(name, sorted(found.jobs), [f"{b.origin}: {b.error}" for b in found.broken])


def jobs_for_dags() -> list[JobDefinition]:
    """The jobs a DAG file makes DAGs for; each broken job file is a warning the DagBag keeps for
    that DAG file (``DagBag.captured_warnings``), while every other job still gets its DAGs.
    Airflow 3.3 re-emits them into the DAG processor's log (logger ``py.warnings``) but neither
    stores them for its UI nor prints them in ``airflow dags report``: ``absreplay jobs`` lists them."""
    found = discover()
    for broken in found.broken:
        warnings.warn(f"absreplay: job file {broken.origin} failed to load: {broken.error}", stacklevel=2)
    return list(found.jobs.values())
