"""Users, projects and members. Keyword-only; they flush but never commit (the router does)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.teams.models import Project, User
from backend.teams.roles import DEFAULT_PROJECT


async def active_user(*, session: AsyncSession, user_id: int | None) -> User | None:
    """The user with this id unless there is none or they are disabled."""
    if user_id is None:
        return None
    user = await session.get(User, user_id)
    return None if user is None or user.disabled_at is not None else user


async def default_project(*, session: AsyncSession) -> Project:
    """Project `default`: the migration makes it; made here too for a database without it."""
    project = await session.scalar(select(Project).where(Project.name == DEFAULT_PROJECT))
    if project is None:
        project = Project(name=DEFAULT_PROJECT, description="Jobs submitted without a project.")
        session.add(project)
        await session.flush()
    return project
