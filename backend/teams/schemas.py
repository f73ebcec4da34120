"""What /me, /users and /projects take and return."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from backend.teams.roles import TEAM_NAME_PATTERN, ProjectRole

TeamName = Annotated[
    str,
    Field(
        pattern=TEAM_NAME_PATTERN,
        description="1-64 characters: a lower-case letter, then lower-case letters, digits, "
        "'_', '.' or '-'.",
    ),
]


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: TeamName


class UserRead(BaseModel):
    id: int
    name: str
    created_at: datetime
    disabled_at: datetime | None
    default_project: str | None = Field(description="Where their jobs go when a spec names none.")


class UserUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    disabled: bool = Field(
        description="true: every token of the user is refused from the next request on "
        "(streams already open run until they reconnect); false: accepted again."
    )


class UserTokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        default="cli",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="What the token is for (a laptop, a CI job).",
    )
    expires_in_seconds: Annotated[int, Field(ge=60, le=10 * 365 * 86_400)] | None = Field(
        default=None, description="Refused after this long; never expires when null."
    )


class ProjectCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: TeamName
    description: str = Field(default="", max_length=1000)
    slurm_account: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="The Slurm account its Slurm jobs are charged to (Slurm's limits apply).",
    )


class MemberRead(BaseModel):
    user: str
    role: ProjectRole


class MemberSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: ProjectRole = Field(
        description="viewer: read; member: also submit and control the project's jobs; "
        "admin: also manage its members."
    )


class ProjectRead(BaseModel):
    id: int
    name: str
    description: str
    created_at: datetime
    max_gpus: int | None = Field(description="GPUs its jobs may hold at once; null: no limit.")
    max_priority: int | None = Field(description="The highest priority its jobs may ask for.")
    may_preempt_other_projects: bool = Field(
        description="Whether its jobs may preempt other projects' jobs of lower priority."
    )
    slurm_account: str | None
    role: ProjectRole = Field(description="Your role in it (admin for an admin token).")


class ProjectDetail(ProjectRead):
    members: list[MemberRead]


class MyProject(BaseModel):
    id: int
    name: str
    role: ProjectRole
    max_gpus: int | None
    max_priority: int | None


class Me(BaseModel):
    """Who the token making the request is, and what it may do where."""

    user: str | None = Field(description="The user's name; null for a token that is no user's.")
    kind: Literal["admin", "viewer", "user"]
    token_id: int | None = Field(description="The stored token's id; null for the server's own.")
    projects: list[MyProject] = Field(description="Every project you have a role in.")
    default_project: str | None = Field(
        description="Where a job goes when its spec names no project."
    )
