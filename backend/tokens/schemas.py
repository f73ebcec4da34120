"""What `/tokens` takes and returns; a token's secret appears once, in TokenCreated."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
StoredKind = Literal["admin", "viewer", "agent"]  # what POST /tokens makes
# Also `user`: a user's own token, made by POST /users/{name}/tokens.
ListedKind = Literal["admin", "viewer", "agent", "user"]


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="Who or what holds it.")
    kind: StoredKind = Field(
        default="viewer",
        description="admin: everything; viewer: read only (GET and the live streams); "
        "agent: join hosts to the cluster.",
    )
    expires_in_seconds: Annotated[int, Field(ge=60, le=10 * 365 * 86_400)] | None = Field(
        default=None, description="Refused after this long; never expires when null."
    )


class TokenRead(BaseModel):
    id: int
    name: str
    kind: ListedKind
    user: str | None = Field(default=None, description="Whose token it is (kind user).")
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    active: bool


class TokenCreated(TokenRead):
    token: str = Field(description="The secret: shown this once, stored only as a hash.")


class TokenSelf(BaseModel):
    """The token that made the request, as the server sees it (never its secret)."""

    kind: Literal["admin", "viewer", "user"] = Field(
        description="admin: may change things; viewer: may only read (the dashboard greys out "
        "its controls); user: what the user's roles allow in each project (GET /me)."
    )
    token_id: int | None = Field(
        description="The stored token's id (`GET /tokens`); null for a token from the server's "
        "settings."
    )
