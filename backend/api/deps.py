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


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_session(request: Request) -> AsyncIterator[AsyncSession]:
    async for session in session_scope(request.app.state.sessions):
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[AsyncSession, Depends(get_session)]

_bearer = HTTPBearer(auto_error=False, description="An admin token (printed by `strata up`).")


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
    registry: TokenRegistry = request.app.state.tokens
    principal = registry.identify(credentials.credentials)
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


def websocket_principal(websocket: WebSocket) -> Principal | None:
    """Who opened a websocket: the Authorization header, or ?token= for browsers."""
    header = websocket.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    token = credentials if scheme.lower() == "bearer" else websocket.query_params.get("token")
    if not token:
        return None
    registry: TokenRegistry = websocket.app.state.tokens
    return registry.identify(token)
