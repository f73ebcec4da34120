"""Dependencies every router shares: settings, a database session, the caller, and the
services the lifespan puts on app.state, each behind a typed getter."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Path, Request, WebSocket, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.requests import HTTPConnection

from agents.protocol import MAX_INT32
from backend.auth import Principal, TokenKind, TokenRegistry
from backend.cluster.board import ClusterBoard
from backend.cluster.usage import UsageBoard
from backend.config import Settings
from backend.db import session_scope, to_the_end
from backend.errors import Forbidden, NotFound
from backend.jobs.models import Job
from backend.scheduling.agent_reports import AgentReports
from backend.scheduling.controller import Controller
from backend.scheduling.hub import AgentHub
from backend.scheduling.intake import JobIntake
from backend.scheduling.runtime_links import RuntimeLinks
from backend.slurm.reconcile import SlurmSync
from backend.streams.broker import Broker
from backend.streams.ingest import Ingestor
from backend.streams.logs import LogStore
from backend.streams.progress import ProgressBoard
from backend.streams.throughput import ThroughputBoard
from backend.teams import service as teams_service
from backend.teams.access import Access, ProjectRole, load_access
from backend.teams.models import Project
from backend.tokens import service as tokens_service

T = TypeVar("T")

# Job ids are 32-bit in the database (and in the agent protocol): a larger one is a 422,
# not an overflow inside the PostgreSQL driver.
JobId = Annotated[int, Path(ge=1, le=MAX_INT32, description="The job's id.")]


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


def get_agent_reports(connection: HTTPConnection) -> AgentReports:
    return app_state(connection, "agent_reports", AgentReports)


def get_intake(connection: HTTPConnection) -> JobIntake:
    return app_state(connection, "intake", JobIntake)


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


def get_progress(connection: HTTPConnection) -> ProgressBoard:
    return app_state(connection, "progress", ProgressBoard)


def get_throughput(connection: HTTPConnection) -> ThroughputBoard:
    return app_state(connection, "throughput", ThroughputBoard)


def get_cluster_board(connection: HTTPConnection) -> ClusterBoard:
    return app_state(connection, "cluster_board", ClusterBoard)


def get_slurm(connection: HTTPConnection) -> SlurmSync | None:
    """The Slurm loop, or None where this server runs no Slurm (STRATA_SLURM_ENABLED); the
    lifespan always sets one or the other."""
    if getattr(connection.app.state, "slurm", "unset") is None:
        return None
    return app_state(connection, "slurm", SlurmSync)


def on_the_loop(getter: Callable[[HTTPConnection], T]) -> Callable[..., Coroutine[Any, Any, T]]:
    """The getter as a dependency run on the event loop: FastAPI runs a plain `def` dependency
    in its thread pool, a round trip to another thread per dependency and request (a dozen
    for a submission) for a look-up that never blocks."""

    async def dependency(connection: HTTPConnection) -> T:
        return getter(connection)

    dependency.__name__ = getter.__name__
    return dependency


SettingsDep = Annotated[Settings, Depends(on_the_loop(get_settings))]
SessionDep = Annotated[AsyncSession, Depends(get_session)]
# For websocket routes: they open a short session per step instead of holding one as long as
# the socket is open.
SessionsDep = Annotated[async_sessionmaker[AsyncSession], Depends(on_the_loop(get_sessions))]
ControllerDep = Annotated[Controller, Depends(on_the_loop(get_controller))]
AgentReportsDep = Annotated[AgentReports, Depends(on_the_loop(get_agent_reports))]
IntakeDep = Annotated[JobIntake, Depends(on_the_loop(get_intake))]
LogStoreDep = Annotated[LogStore, Depends(on_the_loop(get_logs))]
IngestorDep = Annotated[Ingestor, Depends(on_the_loop(get_ingestor))]
BrokerDep = Annotated[Broker, Depends(on_the_loop(get_broker))]
RuntimeLinksDep = Annotated[RuntimeLinks, Depends(on_the_loop(get_runtime_links))]
HubDep = Annotated[AgentHub, Depends(on_the_loop(get_hub))]
UsageDep = Annotated[UsageBoard, Depends(on_the_loop(get_usage))]
ProgressDep = Annotated[ProgressBoard, Depends(on_the_loop(get_progress))]
ThroughputDep = Annotated[ThroughputBoard, Depends(on_the_loop(get_throughput))]
ClusterBoardDep = Annotated[ClusterBoard, Depends(on_the_loop(get_cluster_board))]
SlurmDep = Annotated[SlurmSync | None, Depends(on_the_loop(get_slurm))]

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

    async def dependency(
        principal: Annotated[Principal, Depends(current_principal)],
    ) -> Principal:
        _check_kind(principal, kinds)
        return principal

    return dependency


def _check_kind(principal: Principal, kinds: tuple[TokenKind, ...]) -> None:
    if principal.kind not in kinds:
        allowed = ", ".join(kind.value for kind in kinds)
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"this endpoint needs a token of kind {allowed}; "
            f"a token of kind {principal.kind.value} was given",
        )


# Admin tokens only (the server's or stored ones): what concerns the whole server.
AdminPrincipal = Annotated[Principal, Depends(require(TokenKind.admin))]
# What only reads across every project: an admin or a viewer token.
ReaderPrincipal = Annotated[Principal, Depends(require(TokenKind.admin, TokenKind.viewer))]
# Anyone signed in: admin, viewer and user tokens (what is readable by every user: hosts, the
# cluster's topology, who am I). Routes about a job use JobReader and JobMember instead.
SignedInPrincipal = Annotated[
    Principal, Depends(require(TokenKind.admin, TokenKind.viewer, TokenKind.user))
]
# What may submit and change jobs: an admin token, or a user (a member of the job's project).
ActorPrincipal = Annotated[Principal, Depends(require(TokenKind.admin, TokenKind.user))]


async def caller_access(connection: HTTPConnection, principal: SignedInPrincipal) -> Access:
    """The caller's role in each project (its own short session: the request's session must
    not start a snapshot before the route's change commits)."""
    async with get_sessions(connection)() as session:
        return await load_access(session=session, principal=principal)


CallerAccess = Annotated[Access, Depends(caller_access)]


@dataclass(frozen=True)
class JobScope:
    """A job the caller may act on, and their role in its project."""

    job_id: int
    project_id: int
    role: ProjectRole
    principal: Principal


def _job_scope(needed: ProjectRole) -> Callable[..., Coroutine[Any, Any, JobScope]]:
    kinds = (
        (TokenKind.admin, TokenKind.viewer, TokenKind.user)
        if needed is ProjectRole.viewer
        else (TokenKind.admin, TokenKind.user)
    )

    async def dependency(
        job_id: JobId, connection: HTTPConnection, principal: SignedInPrincipal
    ) -> JobScope:
        _check_kind(principal, kinds)
        async with get_sessions(connection)() as session:
            return await job_scope(
                session=session, principal=principal, job_id=job_id, needed=needed
            )

    return dependency


async def job_scope(
    *, session: AsyncSession, principal: Principal, job_id: int, needed: ProjectRole
) -> JobScope:
    """The caller's scope on a job: a job of a project they are not in is as missing as a job
    that does not exist (a 404 either way, so that neither says it exists)."""
    project_id = await session.scalar(select(Job.project_id).where(Job.id == job_id))
    access = await load_access(session=session, principal=principal)
    role = None if project_id is None else access.role_in(project_id)
    if project_id is None or role is None:
        raise NotFound(f"job {job_id} does not exist")
    if role < needed:
        project = await session.get(Project, project_id)
        raise Forbidden(
            f"{principal.label} is a {role} of project {project.name if project else project_id}; "
            f"this needs a {needed} or an admin of it"
        )
    return JobScope(job_id=job_id, project_id=project_id, role=role, principal=principal)


# Reading a job and anything under it: a viewer of its project or more.
JobReader = Annotated[JobScope, Depends(_job_scope(ProjectRole.viewer))]
# Changing it (cancel, restart, checkpoint, evaluator): a member of its project or more.
JobMember = Annotated[JobScope, Depends(_job_scope(ProjectRole.member))]


async def websocket_principal(websocket: WebSocket) -> Principal | None:
    """Who opened a websocket: the Authorization header, or ?token= for browsers."""
    header = websocket.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    token = credentials if scheme.lower() == "bearer" else websocket.query_params.get("token")
    if not token:
        return None
    return await to_the_end(identify(websocket.app, token))
