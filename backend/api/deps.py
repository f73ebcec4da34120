"""Dependencies every router shares: settings, a database session, and the caller."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, WebSocket, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from backend.auth import Principal, TokenKind, TokenRegistry
from backend.config import Settings
from backend.db import session_scope
from backend.tokens import service as tokens_service


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_session(request: Request) -> AsyncIterator[AsyncSession]:
    async for session in session_scope(request.app.state.sessions):
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[AsyncSession, Depends(get_session)]

_bearer = HTTPBearer(auto_error=False, description="An admin token (printed by `strata up`).")


async def identify(app: Any, token: str) -> Principal | None:
    """The caller a token names: the server's own tokens and task tokens (in memory), else a
    stored token that is neither revoked nor expired (one indexed lookup by its hash)."""
    registry: TokenRegistry = app.state.tokens
    principal = registry.identify(token)
    if principal is not None or not tokens_service.is_stored_token(token):
        return principal
    async with app.state.sessions() as session:
        stored = await tokens_service.find_usable(session=session, secret=token)
    return None if stored is None else Principal(TokenKind(stored.kind), token_id=stored.id)


async def current_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing bearer token: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    principal = await identify(request.app, credentials.credentials)
    if principal is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "invalid bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return principal


def require(*kinds: TokenKind) -> Callable[..., Coroutine[Any, Any, Principal]]:
    """A dependency that admits only the given kinds of token (403 for the others)."""
    allowed = ", ".join(kind.value for kind in kinds)

    async def dependency(
        principal: Annotated[Principal, Depends(current_principal)],
    ) -> Principal:
        if principal.kind not in kinds:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"this endpoint needs a token of kind {allowed}; "
                f"a token of kind {principal.kind.value} was given",
            )
        return principal

    return dependency


AdminPrincipal = Annotated[Principal, Depends(require(TokenKind.admin))]
# What only reads: an admin or a viewer token.
ReaderPrincipal = Annotated[Principal, Depends(require(TokenKind.admin, TokenKind.viewer))]


async def websocket_principal(websocket: WebSocket) -> Principal | None:
    """Who opened a websocket: the Authorization header, or ?token= for browsers."""
    header = websocket.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    token = credentials if scheme.lower() == "bearer" else websocket.query_params.get("token")
    if not token:
        return None
    return await identify(websocket.app, token)
