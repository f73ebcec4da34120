"""Project quotas: set by an admin token only (a project admin setting their own project's
quota would defeat it)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from backend.api.audit import ClientSource
from backend.api.deps import ActorPrincipal, CallerAccess, ControllerDep, SessionDep
from backend.audit import service as audit
from backend.audit.actions import AuditAction
from backend.errors import ROUTER_ERRORS, Forbidden, closed_query, error_responses
from backend.scheduling.quotas import ProjectQuota, ProjectQuotaRead, set_quota
from backend.teams import service as teams
from backend.teams.roles import TEAM_NAME_PATTERN

router = APIRouter(
    prefix="/projects",
    tags=["teams"],
    responses=ROUTER_ERRORS,
    dependencies=[Depends(closed_query)],
)

ProjectName = Annotated[str, Path(pattern=TEAM_NAME_PATTERN, description="The project's name.")]


@router.put("/{name}/quota", response_model=ProjectQuotaRead, responses=error_responses(403, 404))
async def put_quota(
    name: ProjectName,
    body: ProjectQuota,
    session: SessionDep,
    controller: ControllerDep,
    access: CallerAccess,
    _: ActorPrincipal,  # viewer tokens change nothing
    source: ClientSource,
) -> ProjectQuotaRead:
    """Set a project's quotas (null: no limit). A lower GPU quota stops nothing that runs;
    the project's new jobs wait until they fit under it."""
    project = await teams.visible_project(session=session, access=access, name=name)
    if not access.is_global_admin:
        raise Forbidden(f"only an admin token sets quotas; {access.principal.label} cannot")
    before = set_quota(project=project, quota=body)
    await audit.record(
        session=session,
        principal=access.principal,
        source=source,
        action=AuditAction.quota_set,
        project_id=project.id,
        target=f"project {project.name}",
        detail={**body.model_dump(), "before": before.model_dump()},
    )
    await session.commit()
    controller.wake()  # jobs waiting on the old quota are looked at again
    return ProjectQuotaRead(project=project.name, **body.model_dump())
