"""Users, projects and members. Keyword-only; they flush but never commit (the router does)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from backend.db import utcnow
from backend.errors import Conflict, Forbidden, NotFound
from backend.teams.access import Access
from backend.teams.models import Project, ProjectMember, User
from backend.teams.roles import DEFAULT_PROJECT, ProjectRole

DEFAULT_DESCRIPTION = "Jobs submitted without a project."


async def active_user(*, session: AsyncSession, user_id: int | None) -> User | None:
    """The user with this id unless there is none or they are disabled."""
    if user_id is None:
        return None
    user = await session.get(User, user_id)
    return None if user is None or user.disabled_at is not None else user


async def default_project(*, session: AsyncSession) -> Project:
    """Project `default`: the migration makes it; made here too for a database without it."""
    project = await find_project(session=session, name=DEFAULT_PROJECT)
    if project is None:
        project = Project(name=DEFAULT_PROJECT, description=DEFAULT_DESCRIPTION)
        session.add(project)
        await session.flush()
    return project


async def find_project(*, session: AsyncSession, name: str) -> Project | None:
    return await session.scalar(select(Project).where(Project.name == name))


async def find_user(*, session: AsyncSession, name: str) -> User | None:
    return await session.scalar(select(User).where(User.name == name))


async def visible_project(*, session: AsyncSession, access: Access, name: str) -> Project:
    """A project the caller has a role in; any other is as missing as one that does not exist."""
    project = await find_project(session=session, name=name)
    if project is None or access.role_in(project.id) is None:
        raise NotFound(f"no project named {name}")
    return project


async def project_for_submit(*, session: AsyncSession, access: Access, name: str | None) -> Project:
    """Where a new job goes: the project its spec names, else the user's default project,
    else `default`; the caller must be a member of it (or an admin of it)."""
    project = await submit_target(session=session, user_id=access.principal.user_id, name=name)
    return check_may_submit(access=access, project=project, name=name)


async def submit_target(
    *, session: AsyncSession, user_id: int | None, name: str | None
) -> Project | None:
    """The project a job naming `name` (or no project) goes to, for that user; None if no
    project has that name."""
    project: Project | None = None
    if name is None and user_id is not None:
        user = await session.get(User, user_id)
        if user is not None and user.default_project_id is not None:
            project = await session.get(Project, user.default_project_id)
    if project is None and name is None:
        project = await default_project(session=session)
    if project is None:
        assert name is not None  # else `default` was found or made above
        project = await find_project(session=session, name=name)
    return project


def check_may_submit(*, access: Access, project: Project | None, name: str | None) -> Project:
    """`project` (submit_target's answer for `name`) if the caller may submit to it; raises
    otherwise."""
    name = project.name if project is not None else name
    if project is None or access.role_in(project.id) is None:
        raise NotFound(f"no project named {name}")  # as visible_project says it
    role = access.role_in(project.id)
    if role is None or role < ProjectRole.member:
        raise Forbidden(
            f"{access.principal.label} is a {role} of project {name}; submitting needs a member"
        )
    return project


async def create_user(*, session: AsyncSession, name: str) -> User:
    if await find_user(session=session, name=name) is not None:
        raise Conflict(f"a user named {name} exists already")
    user = User(name=name)
    session.add(user)
    await _flush_unique(session, f"a user named {name} exists already")
    return user


async def list_users(*, session: AsyncSession) -> Sequence[User]:
    return (await session.scalars(select(User).order_by(User.name))).all()


async def get_user(*, session: AsyncSession, name: str) -> User:
    user = await find_user(session=session, name=name)
    if user is None:
        raise NotFound(f"no user named {name}")
    return user


async def set_disabled(*, session: AsyncSession, user: User, disabled: bool) -> bool:
    """Disable the user (their tokens are refused from the next request on) or enable them
    again; False when they already were as asked."""
    if (user.disabled_at is not None) == disabled:
        return False
    user.disabled_at = utcnow() if disabled else None
    await session.flush()
    return True


async def create_project(
    *,
    session: AsyncSession,
    name: str,
    description: str,
    slurm_account: str | None = None,
) -> Project:
    if await find_project(session=session, name=name) is not None:
        raise Conflict(f"a project named {name} exists already")
    project = Project(name=name, description=description, slurm_account=slurm_account)
    session.add(project)
    await _flush_unique(session, f"a project named {name} exists already")
    return project


async def list_projects(*, session: AsyncSession, access: Access) -> Sequence[Project]:
    """The projects the caller has a role in, by name."""
    statement = select(Project).order_by(Project.name)
    ids = access.project_ids
    if ids is not None:
        statement = statement.where(Project.id.in_(ids))
    return (await session.scalars(statement)).all()


async def members(*, session: AsyncSession, project_id: int) -> list[tuple[str, ProjectRole]]:
    """(user name, role) of each member, by name."""
    rows = await session.execute(
        select(User.name, ProjectMember.role)
        .join(ProjectMember, ProjectMember.user_id == User.id)
        .where(ProjectMember.project_id == project_id)
        .order_by(User.name)
    )
    return [(name, role) for name, role in rows]


async def set_member(
    *, session: AsyncSession, project: Project, user: User, role: ProjectRole
) -> ProjectMember:
    """Make the user a member with this role (or change their role). A user's first project
    becomes their default project."""
    member = await session.get(ProjectMember, (project.id, user.id))
    if member is None:
        member = ProjectMember(project_id=project.id, user_id=user.id, role=role)
        session.add(member)
    else:
        member.role = role
    if user.default_project_id is None:
        user.default_project_id = project.id
    await session.flush()
    return member


async def remove_member(*, session: AsyncSession, project: Project, user: User) -> None:
    member = await session.get(ProjectMember, (project.id, user.id))
    if member is None:
        raise NotFound(f"{user.name} is not a member of project {project.name}")
    await session.delete(member)
    if user.default_project_id == project.id:
        user.default_project_id = None
    await session.flush()


async def _flush_unique(session: AsyncSession, message: str) -> None:
    """Flush; a unique name taken meanwhile by a concurrent request is a 409, not a 500."""
    try:
        async with session.begin_nested():
            await session.flush()
    except IntegrityError as exc:
        raise Conflict(message) from exc
