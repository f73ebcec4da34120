"""Token operations. Keyword-only; they flush but never commit (the router does)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.db import utcnow
from backend.errors import NotFound
from backend.teams.models import User
from backend.tokens.models import ApiToken
from backend.tokens.schemas import ListedKind, TokenCreated, TokenRead

# Stored tokens are recognisable at a glance (and by secret scanners): stk_ + 43 characters.
PREFIX = "stk_"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def is_stored_token(token: str) -> bool:
    return token.startswith(PREFIX) and 20 <= len(token) <= 128


def token_read(token: ApiToken, now: datetime | None = None, user: str | None = None) -> TokenRead:
    now = now or utcnow()
    return TokenRead(
        id=token.id,
        name=token.name,
        kind=token.kind,
        user=user,
        prefix=token.prefix,
        created_at=token.created_at,
        expires_at=token.expires_at,
        revoked_at=token.revoked_at,
        active=usable(token, now),
    )


def usable(token: ApiToken, now: datetime) -> bool:
    return token.revoked_at is None and (token.expires_at is None or token.expires_at > now)


async def create_token(
    *,
    session: AsyncSession,
    name: str,
    kind: ListedKind,
    expires_in_seconds: int | None,
    user: User | None = None,
) -> TokenCreated:
    """A new token; kind user needs the user it belongs to, and no other kind has one."""
    if (kind == "user") != (user is not None):
        raise ValueError("a token of kind user, and only one, belongs to a user")
    secret = PREFIX + secrets.token_urlsafe(32)
    now = utcnow()
    token = ApiToken(
        name=name,
        kind=kind,
        user_id=None if user is None else user.id,
        token_hash=token_hash(secret),
        prefix=secret[:12],
        created_at=now,
        expires_at=None
        if expires_in_seconds is None
        else now + timedelta(seconds=expires_in_seconds),
    )
    session.add(token)
    await session.flush()
    owner = None if user is None else user.name
    return TokenCreated(**token_read(token, now, owner).model_dump(), token=secret)


async def list_tokens(
    *, session: AsyncSession, user_id: int | None = None
) -> list[tuple[ApiToken, str | None]]:
    """Stored tokens with their user's name (all of them; or one user's when `user_id`)."""
    statement = (
        select(ApiToken, User.name)
        .outerjoin(User, User.id == ApiToken.user_id)
        .order_by(ApiToken.id)
    )
    if user_id is not None:
        statement = statement.where(ApiToken.user_id == user_id)
    return [(token, name) for token, name in await session.execute(statement)]


async def get_token(*, session: AsyncSession, token_id: int) -> ApiToken:
    token = await session.get(ApiToken, token_id)
    if token is None:
        raise NotFound(f"token {token_id} does not exist")
    return token


async def revoke_token(*, session: AsyncSession, token_id: int) -> ApiToken:
    token = await session.get(ApiToken, token_id)
    if token is None:
        raise NotFound(f"token {token_id} does not exist")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        await session.flush()
    return token


async def find_usable(*, session: AsyncSession, secret: str) -> ApiToken | None:
    """The stored token with this secret, if it is neither revoked nor expired."""
    token = await session.scalar(select(ApiToken).where(ApiToken.token_hash == token_hash(secret)))
    if token is None or not usable(token, utcnow()):
        return None
    return token
