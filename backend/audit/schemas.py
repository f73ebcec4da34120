"""What `GET /audit` returns."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class AuditEntryRead(BaseModel):
    id: int
    at: datetime
    actor: str = Field(description='Who: a user\'s name ("alice") or a token ("admin token 3").')
    user_id: int | None
    token_id: int | None = Field(description="The stored token used; null for the server's own.")
    action: str = Field(description="What, e.g. job.cancel (see AuditAction).")
    project: str | None = Field(description="The project it concerns, if any.")
    job_id: int | None
    target: str | None = Field(description='What else it names: "worker:1", "token 4", "alice".')
    detail: dict[str, Any]
    source: str | None = Field(
        description="The client's address as the server saw it (a proxy's, behind one)."
    )


class AuditPage(BaseModel):
    items: list[AuditEntryRead] = Field(description="Newest first.")
    next_before: int | None = Field(
        description="Pass as `before` for the next (older) page; null when this is the last."
    )
