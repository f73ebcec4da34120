"""Who am I (`/me`), users and their tokens, projects and their members."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, status
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection

from backend.api.audit import ClientSource
from backend.api.deps import (
    ActorPrincipal,
    AdminPrincipal,
    CallerAccess,
    SessionDep,
    get_sessions,
)
from backend.audit import service as audit
from backend.audit.actions import AuditAction
from backend.auth import TokenKind
from backend.errors import ROUTER_ERRORS, Forbidden, NotFound, closed_query, error_responses
from backend.teams import service
from backend.teams.access import Access
from backend.teams.models import Project, User
from backend.teams.roles import TEAM_NAME_PATTERN, ProjectRole
from backend.teams.schemas import (
    Me,
    MemberRead,
    MemberSet,
    MyProject,
    ProjectCreate,
    ProjectDetail,
    ProjectRead,
    UserCreate,
    UserRead,
    UserTokenCreate,
    UserUpdate,
)
from backend.tokens import service as tokens_service
from backend.tokens.schemas import TokenCreated

router = APIRouter(tags=["teams"], responses=ROUTER_ERRORS, dependencies=[Depends(closed_query)])

UserName = Annotated[str, Path(pattern=TEAM_NAME_PATTERN, description="The user's name.")]
ProjectName = Annotated[str, Path(pattern=TEAM_NAME_PATTERN, description="The project's name.")]


async def administered_project(
    name: ProjectName, connection: HTTPConnection, access: CallerAccess
) -> int:
    """The id of a project the caller administers: 404 when they have no role in it, 403
    below admin. A dependency, so that it answers before the body is validated."""
    async with get_sessions(connection)() as session:
        project = await service.visible_project(session=session, access=access, name=name)
    role = _role(access, project)
    if role < ProjectRole.admin:
        raise Forbidden(
            f"{access.principal.label} is a {role} of project {name}; managing its members "
            "needs an admin of it"
        )
    return project.id


AdministeredProject = Annotated[int, Depends(administered_project)]


@router.get("/me", response_model=Me)
async def read_me(session: SessionDep, access: CallerAccess) -> Me:
    """Who this token is, and its role in each project (what the dashboard may offer)."""
    principal = access.principal
    projects = await service.list_projects(session=session, access=access)
    default: str | None = None
    if principal.user_id is not None:
        user = await session.get(User, principal.user_id)
        if user is not None and user.default_project_id is not None:
            chosen = await session.get(Project, user.default_project_id)
            default = None if chosen is None else chosen.name
    else:
        default = (await service.default_project(session=session)).name
    return Me(
        user=principal.user_name,
        kind=principal.kind.value,
        token_id=principal.token_id,
        projects=[
            MyProject(
                id=project.id,
                name=project.name,
                role=_role(access, project),
                max_gpus=project.max_gpus,
                max_priority=project.max_priority,
            )
            for project in projects
        ],
        default_project=default,
    )


@router.get("/users", response_model=list[UserRead])
async def list_users(session: SessionDep, _: AdminPrincipal) -> list[UserRead]:
    """Every user (admin tokens only)."""
    users = await service.list_users(session=session)
    names = await _project_names(session)
    return [_user_read(user, names) for user in users]


@router.post(
    "/users",
    status_code=status.HTTP_201_CREATED,
    response_model=UserRead,
    responses=error_responses(409),
)
async def create_user(
    body: UserCreate, session: SessionDep, principal: AdminPrincipal, source: ClientSource
) -> UserRead:
    """A new user, in no project yet (`PUT /projects/{name}/members/{user}`); give them a
    token with `POST /users/{name}/tokens`."""
    user = await service.create_user(session=session, name=body.name)
    await audit.record(
        session=session,
        principal=principal,
        source=source,
        action=AuditAction.user_create,
        target=f"user {user.name}",
    )
    await session.commit()
    return _user_read(user, {})


@router.patch("/users/{name}", response_model=UserRead, responses=error_responses(404))
async def update_user(
    name: UserName,
    body: UserUpdate,
    session: SessionDep,
    principal: AdminPrincipal,
    source: ClientSource,
) -> UserRead:
    """Disable a user (every token of theirs is refused from the next request on; their jobs
    and memberships stay) or enable them again (admin tokens only)."""
    user = await service.get_user(session=session, name=name)
    if await service.set_disabled(session=session, user=user, disabled=body.disabled):
        await audit.record(
            session=session,
            principal=principal,
            source=source,
            action=AuditAction.user_disable if body.disabled else AuditAction.user_enable,
            target=f"user {user.name}",
        )
    await session.commit()
    return _user_read(user, await _project_names(session))


@router.post(
    "/users/{name}/tokens",
    status_code=status.HTTP_201_CREATED,
    response_model=TokenCreated,
    responses=error_responses(404),
)
async def create_user_token(
    name: UserName,
    body: UserTokenCreate,
    session: SessionDep,
    principal: ActorPrincipal,
    source: ClientSource,
) -> TokenCreated:
    """A token for this user (an admin token, or the user for themselves); its secret is in
    this answer only. It acts as the user: their roles in their projects."""
    if principal.kind is TokenKind.user and principal.user_name != name:
        raise Forbidden(f"{principal.label} may make tokens for themselves only, not for {name}")
    user = await service.get_user(session=session, name=name)
    created = await tokens_service.create_token(
        session=session,
        name=body.name,
        kind="user",
        expires_in_seconds=body.expires_in_seconds,
        user=user,
    )
    await audit.record(
        session=session,
        principal=principal,
        source=source,
        action=AuditAction.token_create,
        target=f"token {created.id}",
        detail={"name": created.name, "kind": created.kind, "user": user.name},
    )
    await session.commit()
    return created


@router.get("/projects", response_model=list[ProjectRead])
async def list_projects(session: SessionDep, access: CallerAccess) -> list[ProjectRead]:
    """The projects you have a role in (every project for admin and viewer tokens)."""
    projects = await service.list_projects(session=session, access=access)
    return [_project_read(project, _role(access, project)) for project in projects]


@router.post(
    "/projects",
    status_code=status.HTTP_201_CREATED,
    response_model=ProjectRead,
    responses=error_responses(409),
)
async def create_project(
    body: ProjectCreate,
    session: SessionDep,
    principal: AdminPrincipal,
    access: CallerAccess,
    source: ClientSource,
) -> ProjectRead:
    """A new project, with no members and no quota (admin tokens only)."""
    project = await service.create_project(
        session=session,
        name=body.name,
        description=body.description,
        slurm_account=body.slurm_account,
    )
    await audit.record(
        session=session,
        principal=principal,
        source=source,
        action=AuditAction.project_create,
        project_id=project.id,
        target=f"project {project.name}",
    )
    await session.commit()
    return _project_read(project, ProjectRole.admin)


@router.get("/projects/{name}", response_model=ProjectDetail, responses=error_responses(404))
async def read_project(
    name: ProjectName, session: SessionDep, access: CallerAccess
) -> ProjectDetail:
    """A project you have a role in, with its members."""
    project = await service.visible_project(session=session, access=access, name=name)
    members = await service.members(session=session, project_id=project.id)
    return ProjectDetail(
        **_project_read(project, _role(access, project)).model_dump(),
        members=[MemberRead(user=user, role=role) for user, role in members],
    )


@router.put(
    "/projects/{name}/members/{user}",
    response_model=MemberRead,
    responses=error_responses(404),
)
async def set_member(
    name: ProjectName,
    user: UserName,
    body: MemberSet,
    session: SessionDep,
    principal: ActorPrincipal,
    administered: AdministeredProject,
    source: ClientSource,
) -> MemberRead:
    """Add a user to the project with a role, or change their role (the project's admins and
    admin tokens). A user's first project becomes their default project."""
    project = await _project(session, administered)
    member = await service.get_user(session=session, name=user)
    await service.set_member(session=session, project=project, user=member, role=body.role)
    await audit.record(
        session=session,
        principal=principal,
        source=source,
        action=AuditAction.member_set,
        project_id=project.id,
        target=f"user {member.name}",
        detail={"role": body.role.value},
    )
    await session.commit()
    return MemberRead(user=member.name, role=body.role)


@router.delete(
    "/projects/{name}/members/{user}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=error_responses(404),
)
async def remove_member(
    name: ProjectName,
    user: UserName,
    session: SessionDep,
    principal: ActorPrincipal,
    administered: AdministeredProject,
    source: ClientSource,
) -> None:
    """Take a user out of the project (the project's admins and admin tokens)."""
    project = await _project(session, administered)
    member = await service.get_user(session=session, name=user)
    await service.remove_member(session=session, project=project, user=member)
    await audit.record(
        session=session,
        principal=principal,
        source=source,
        action=AuditAction.member_remove,
        project_id=project.id,
        target=f"user {member.name}",
    )
    await session.commit()


async def _project(session: AsyncSession, project_id: int) -> Project:
    project = await session.get(Project, project_id)
    if project is None:  # deleted since the check: projects are not deleted, but be exact
        raise NotFound(f"project {project_id} does not exist")
    return project


def _role(access: Access, project: Project) -> ProjectRole:
    role = access.role_in(project.id)
    if role is None:  # the lists only hold projects the caller has a role in
        raise NotFound(f"no project named {project.name}")
    return role


async def _project_names(session: AsyncSession) -> dict[int, str]:
    rows = await session.execute(select(Project.id, Project.name))
    return {project_id: name for project_id, name in rows}


def _user_read(user: User, project_names: dict[int, str]) -> UserRead:
    default = user.default_project_id
    return UserRead(
        id=user.id,
        name=user.name,
        created_at=user.created_at,
        disabled_at=user.disabled_at,
        default_project=None if default is None else project_names.get(default),
    )


def _project_read(project: Project, role: ProjectRole) -> ProjectRead:
    return ProjectRead(
        id=project.id,
        name=project.name,
        description=project.description,
        created_at=project.created_at,
        max_gpus=project.max_gpus,
        max_priority=project.max_priority,
        may_preempt_other_projects=project.may_preempt_other_projects,
        slurm_account=project.slurm_account,
        role=role,
    )
