"""The audit trail: every change made through the API, who made it, when and from where."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from sqlalchemy import select

from agents.protocol import MAX_INT32
from backend.api.deps import SessionDep, current_principal
from backend.audit import service
from backend.audit.actions import AuditAction
from backend.audit.models import AuditEntry
from backend.audit.schemas import AuditEntryRead, AuditPage
from backend.auth import Principal
from backend.errors import ROUTER_ERRORS, NotFound, closed_query, error_responses
from backend.teams.access import load_access
from backend.teams.models import Project
from backend.teams.roles import TEAM_NAME_PATTERN, ProjectRole

router = APIRouter(
    prefix="/audit", tags=["audit"], responses=ROUTER_ERRORS, dependencies=[Depends(closed_query)]
)


async def client_source(request: Request) -> str | None:
    """Where a request came from, as the server saw it: behind a reverse proxy this is the
    proxy's address (the server trusts no forwarded-for header)."""
    return request.client.host if request.client is not None else None


# What a changing route passes to audit.service.record as `source`.
ClientSource = Annotated[str | None, Depends(client_source)]


@router.get("", response_model=AuditPage, responses=error_responses(403, 404))
async def list_audit(
    session: SessionDep,
    principal: Annotated[Principal, Depends(current_principal)],
    project: Annotated[str | None, Query(pattern=TEAM_NAME_PATTERN)] = None,
    job: Annotated[int | None, Query(ge=1, le=MAX_INT32, description="A job's id.")] = None,
    actor: Annotated[
        str | None,
        Query(min_length=1, max_length=128, pattern=r"^[^\x00]*$", description="e.g. alice"),
    ] = None,
    action: AuditAction | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    before: Annotated[
        int | None, Query(ge=1, le=2**63 - 1, description="Only entries older than this id.")
    ] = None,
) -> AuditPage:
    """Changes made through the API, newest first, filtered: all of them for an admin token,
    their projects' for project admins."""
    visible = await _visible_projects(session, principal)
    names = {pid: name for pid, name in await session.execute(select(Project.id, Project.name))}
    project_id: int | None = None
    if project is not None:
        project_id = next((i for i, name in names.items() if name == project), None)
        # Another project is not named as existing, as jobs of other projects are not.
        if project_id is None or (visible is not None and project_id not in visible):
            raise NotFound(f"project {project} does not exist")
    rows = await service.list_entries(
        session=session,
        project_ids=visible,
        project_id=project_id,
        job_id=job,
        actor=actor,
        action=action,
        before=before,
        limit=limit,
    )
    return AuditPage(
        items=[_read(row, names) for row in rows],
        next_before=rows[-1].id if len(rows) == limit else None,
    )


async def _visible_projects(session: SessionDep, principal: Principal) -> set[int] | None:
    """None: every entry (an admin token); else the projects the caller administers."""
    access = await load_access(session=session, principal=principal)
    if access.is_global_admin:
        return None
    administered = {pid for pid, role in access.roles.items() if role >= ProjectRole.admin}
    if not administered:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "the audit trail is for admin tokens and project admins "
            f"({principal.label} administers no project)",
        )
    return administered


def _read(row: AuditEntry, names: dict[int, str]) -> AuditEntryRead:
    return AuditEntryRead(
        id=row.id,
        at=row.at,
        actor=row.actor,
        user_id=row.user_id,
        token_id=row.token_id,
        action=row.action,
        project=None if row.project_id is None else names.get(row.project_id),
        job_id=row.job_id,
        target=row.target,
        detail=row.detail,
        source=row.source,
    )
