"""Who may see a job's checkpoints and who may recover it: asked of Airflow's auth manager.

A job's audit is readable by whoever may read its ``abs_<job>_recover`` DAG; the
recover and rewind buttons appear only for whoever may trigger a run of it,
exactly what Airflow's ``POST /api/v2/dags/{dag_id}/dagRuns`` checks, so the page
never offers what the API would refuse (and the API still decides).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.base_auth_manager import BaseAuthManager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, HTTPException


def recover_dag_id(job: str) -> str:
    return f"abs_{job}_recover"


@dataclass(frozen=True)
class JobAccess:
    job: str
    dag_id: str
    can_read: bool
    can_trigger: bool


def auth_manager() -> BaseAuthManager:
    """The api-server's auth manager (a dependency, so tests can hand in their own)."""
    return get_auth_manager()


User = Annotated[BaseUser, Depends(get_user)]
AuthManager = Annotated[BaseAuthManager, Depends(auth_manager)]


def job_access(manager: BaseAuthManager, user: BaseUser, job: str) -> JobAccess:
    dag_id = recover_dag_id(job)
    details = DagDetails(id=dag_id)
    can_read = manager.is_authorized_dag(method="GET", details=details, user=user)
    can_trigger = can_read and manager.is_authorized_dag(
        method="POST", access_entity=DagAccessEntity.RUN, details=details, user=user)
    return JobAccess(job, dag_id, can_read, can_trigger)


def readable(manager: BaseAuthManager, user: BaseUser, job: str) -> JobAccess:
    """The user's access to ``job``; 403 when they may not even read it."""
    access = job_access(manager, user, job)
    if not access.can_read:
        raise HTTPException(403, f"you may not read the DAG {access.dag_id}, so not the checkpoints of {job!r}")
    return access
