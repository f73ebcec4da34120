"""The first user `strata up` makes: named after the OS user, admin of project `default`."""

from __future__ import annotations

import re

from sqlalchemy.ext.asyncio import AsyncSession

from backend.teams import service
from backend.teams.models import User
from backend.teams.roles import TEAM_NAME, ProjectRole

FALLBACK_USER = "admin"


def user_name_for(os_user: str | None) -> str:
    """A valid user name from an OS user name ("Jane.Doe" → "jane.doe", "42x" → "x"), or
    `admin` when nothing of it is left."""
    name = re.sub(r"[^a-z0-9_.-]+", "-", (os_user or "").lower())
    name = re.sub(r"^[^a-z]+", "", name)[:64]
    return name if TEAM_NAME.fullmatch(name) else FALLBACK_USER


async def first_user(*, session: AsyncSession, name: str) -> User:
    """The user `name` (made when missing) as an admin of project `default` (made when
    missing too); running it again changes nothing."""
    user = await service.find_user(session=session, name=name)
    if user is None:
        user = await service.create_user(session=session, name=name)
    project = await service.default_project(session=session)
    await service.set_member(session=session, project=project, user=user, role=ProjectRole.admin)
    return user
