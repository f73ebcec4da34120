"""Users, projects and who belongs to which project in what role."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, Enum, ForeignKey, Integer, String, Text, true
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base, UTCDateTime, utcnow
from backend.teams.roles import ProjectRole


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)  # TEAM_NAME_PATTERN
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # A disabled user's tokens are refused; the user stays, for the records that name them.
    disabled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The project a job goes to when its spec names none.
    default_project_id: Mapped[int | None] = mapped_column(
        ForeignKey("projects.id", ondelete="SET NULL")
    )


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)  # TEAM_NAME_PATTERN
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Quotas on the native backend; null is no limit.
    max_gpus: Mapped[int | None] = mapped_column(Integer)
    max_priority: Mapped[int | None] = mapped_column(Integer)
    # Whether its jobs may preempt other projects' jobs of lower priority (its own, always).
    may_preempt_other_projects: Mapped[bool] = mapped_column(
        Boolean, default=True, server_default=true()
    )
    # The Slurm account the project's Slurm jobs are charged to (Slurm's limits apply there).
    slurm_account: Mapped[str | None] = mapped_column(String(64))


class ProjectMember(Base):
    __tablename__ = "project_members"

    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    role: Mapped[ProjectRole] = mapped_column(
        Enum(ProjectRole, native_enum=False, length=16, validate_strings=True)
    )
