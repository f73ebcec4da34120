"""What a caller may do in each project: their role there, or none.

A user has the roles their memberships give; an admin token (the server's or a stored one) is
admin of every project and a viewer token viewer of every project. Agent, task and job agent
tokens have no project role: the routes they may use say so with `require(...)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.auth import Principal, TokenKind
from backend.teams.models import Project, ProjectMember
from backend.teams.roles import ProjectRole

__all__ = ["Access", "ProjectRole", "load_access", "project_roles"]

# The role a token kind has in every project, whoever's it is.
_EVERYWHERE = {TokenKind.admin: ProjectRole.admin, TokenKind.viewer: ProjectRole.viewer}


@dataclass(frozen=True)
class Access:
    principal: Principal
    everywhere: ProjectRole | None = None  # the role in every project (admin, viewer tokens)
    roles: Mapping[int, ProjectRole] = field(default_factory=dict)  # project id → role

    def role_in(self, project_id: int) -> ProjectRole | None:
        return self.everywhere or self.roles.get(project_id)

    def allows(self, project_id: int, needed: ProjectRole) -> bool:
        role = self.role_in(project_id)
        return role is not None and role >= needed

    @property
    def project_ids(self) -> frozenset[int] | None:
        """The projects whose jobs the caller sees; None: every project."""
        return None if self.everywhere is not None else frozenset(self.roles)

    @property
    def is_global_admin(self) -> bool:
        return self.everywhere is ProjectRole.admin


async def load_access(*, session: AsyncSession, principal: Principal) -> Access:
    everywhere = _EVERYWHERE.get(principal.kind)
    if everywhere is not None or principal.user_id is None:
        return Access(principal, everywhere)
    rows = await session.execute(
        select(ProjectMember.project_id, ProjectMember.role).where(
            ProjectMember.user_id == principal.user_id
        )
    )
    return Access(principal, roles={project_id: role for project_id, role in rows})


async def project_roles(*, session: AsyncSession, principal: Principal) -> dict[int, ProjectRole]:
    """The caller's role in each project they have one in (every project for admin and
    viewer tokens)."""
    access = await load_access(session=session, principal=principal)
    if access.everywhere is None:
        return dict(access.roles)
    ids = (await session.scalars(select(Project.id))).all()
    return dict.fromkeys(ids, access.everywhere)
