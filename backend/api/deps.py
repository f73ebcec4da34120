"""Dependencies every router shares: settings, a database session, the caller, and the
services the lifespan puts on app.state, each behind a typed getter."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Request, WebSocket, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.requests import HTTPConnection

from backend.auth import Principal, TokenKind, TokenRegistry
from backend.config import Settings
from backend.db import session_scope
from backend.hosts.usage import UsageBoard
from backend.scheduling.controller import Controller
from backend.scheduling.hub import AgentHub
from backend.scheduling.runtime_links import RuntimeLinks
from backend.streams.broker import Broker
from backend.streams.ingest import Ingestor
from backend.streams.logs import LogStore
from backend.teams import service as teams_service
from backend.tokens import service as tokens_service

T = TypeVar("T")


def app_state(connection: HTTPConnection, name: str, kind: type[T]) -> T:
    """`app.state.<name>`, checked to be a `kind`: a route that runs before the lifespan has
    built it (or after something replaced it) fails here, naming what is missing."""
    value = getattr(connection.app.state, name, None)
    if not isinstance(value, kind):
        found = "nothing" if value is None else type(value).__name__
        raise RuntimeError(
            f"app.state.{name} should be a {kind.__name__}, found {found}: "
            "the application's lifespan has not run"
        )
    return value


# Each getter takes an HTTPConnection, so the same dependency serves HTTP and websocket routes.
def get_settings(connection: HTTPConnection) -> Settings:
    return app_state(connection, "settings", Settings)


def get_sessions(connection: HTTPConnection) -> async_sessionmaker[AsyncSession]:
    sessions: async_sessionmaker[AsyncSession] = app_state(
        connection, "sessions", async_sessionmaker
    )
    return sessions


async def get_session(connection: HTTPConnection) -> AsyncIterator[AsyncSession]:
    async for session in session_scope(get_sessions(connection)):
        yield session


def get_controller(connection: HTTPConnection) -> Controller:
    return app_state(connection, "controller", Controller)


def get_logs(connection: HTTPConnection) -> LogStore:
    return app_state(connection, "logs", LogStore)


def get_ingestor(connection: HTTPConnection) -> Ingestor:
    return app_state(connection, "ingestor", Ingestor)


def get_broker(connection: HTTPConnection) -> Broker:
    return app_state(connection, "broker", Broker)


def get_runtime_links(connection: HTTPConnection) -> RuntimeLinks:
    return app_state(connection, "runtimes", RuntimeLinks)


def get_hub(connection: HTTPConnection) -> AgentHub:
    return app_state(connection, "hub", AgentHub)


def get_usage(connection: HTTPConnection) -> UsageBoard:
    return app_state(connection, "usage", UsageBoard)


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[AsyncSession, Depends(get_session)]
# For websocket routes: they open a short session per step instead of holding one as long as
# the socket is open.
SessionsDep = Annotated[async_sessionmaker[AsyncSession], Depends(get_sessions)]
ControllerDep = Annotated[Controller, Depends(get_controller)]
LogStoreDep = Annotated[LogStore, Depends(get_logs)]
IngestorDep = Annotated[Ingestor, Depends(get_ingestor)]
BrokerDep = Annotated[Broker, Depends(get_broker)]
RuntimeLinksDep = Annotated[RuntimeLinks, Depends(get_runtime_links)]
HubDep = Annotated[AgentHub, Depends(get_hub)]
UsageDep = Annotated[UsageBoard, Depends(get_usage)]

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
        if stored is None:
            return None
        if stored.kind != TokenKind.user:
            return Principal(TokenKind(stored.kind), token_id=stored.id)
        # A user token acts as its user, and only while that user is not disabled.
        user = await teams_service.active_user(session=session, user_id=stored.user_id)
    if user is None:
        return None
    return Principal(TokenKind.user, token_id=stored.id, user_id=user.id, user_name=user.name)


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
