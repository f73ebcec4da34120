"""Live streams over websockets: one job's metrics, logs and events, and the cluster's events.

The first client frame subscribes, optionally from a cursor. The server sends history after
the cursor, a `history_end` frame, then live frames; every frame carries the cursor to resume
from. A subscriber that falls behind is closed (1013) with a reason; it resumes from its last
cursor and history fills the gap.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, WebSocket, WebSocketDisconnect
from pydantic import TypeAdapter
from pydantic.json_schema import models_json_schema
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agents.protocol import MAX_INT32
from backend.api.deps import (
    get_broker,
    get_logs,
    get_sessions,
    get_settings,
    job_scope,
    websocket_principal,
)
from backend.api.frame_limits import POLICY_VIOLATION, FrameLimits, Inbound, close
from backend.auth import Principal, TokenKind
from backend.config import Settings
from backend.db import to_the_end
from backend.errors import NotFound
from backend.jobs import queries
from backend.jobs.models import Job, JobEvent
from backend.streams.broker import CLUSTER_TOPIC, SubscriberTooSlow, job_topic
from backend.streams.cursor import Cursor, InvalidCursor
from backend.streams.frames import (
    HISTORY_END,
    SUBSCRIBE_EXAMPLE,
    ServerFrame,
    StreamFrame,
    Subscribe,
)
from backend.streams.history import advance, job_history
from backend.streams.publishing import event_frame
from backend.teams.access import Access, ProjectRole, load_access

# Subscribe is defined with the other frames; it is also this router's to export.
__all__ = ["Subscribe", "document_frames", "router"]

router = APIRouter()

CLUSTER_HISTORY_EVENTS = 200
# Who may open a stream; what a user sees is limited to their projects' jobs.
STREAM_READERS = (TokenKind.admin, TokenKind.viewer, TokenKind.user)


_subscribe_frame = TypeAdapter(Subscribe)


def frame_limits(settings: Settings) -> FrameLimits:
    return FrameLimits(
        max_bytes=settings.stream_frame_bytes,
        frames_per_second=settings.stream_frames_per_second,
        burst=settings.stream_frame_burst,
    )


@asynccontextmanager
async def _opened(websocket: WebSocket) -> AsyncIterator[Inbound | None]:
    """Accept and authenticate a stream, holding one of its token's stream slots meanwhile.

    Yields None when the socket was refused (and closed with the reason).
    """
    await websocket.accept()
    principal = await websocket_principal(websocket)
    if principal is None or principal.kind not in STREAM_READERS:
        await close(
            websocket,
            POLICY_VIOLATION,
            "an admin or viewer token, or a user's token, is required (header or ?token=)",
            cause="unauthenticated",
        )
        yield None
        return
    websocket.state.principal = principal
    settings, broker = get_settings(websocket), get_broker(websocket)
    inbound = Inbound(websocket, frame_limits(settings), f"a stream of the {principal.kind} token")
    limit = settings.max_streams_per_token
    if not broker.streams.take(principal, limit):
        await inbound.refuse(
            POLICY_VIOLATION,
            f"too many open streams for this token (limit {limit})",
            cause="too_many_streams",
        )
        yield None
        return
    try:
        yield inbound
    except WebSocketDisconnect:
        pass  # the client went away while the server was sending
    finally:
        broker.streams.release(principal)


async def _subscribe(inbound: Inbound) -> Cursor | None:
    """Read and check the first frame; close with a reason if it is bad or does not come."""
    settings = get_settings(inbound.websocket)
    request = await inbound.first(
        _subscribe_frame,
        "subscribe",
        within=settings.stream_subscribe_seconds,
        example=SUBSCRIBE_EXAMPLE,
    )
    if request is None:
        return None
    try:
        return Cursor.decode(request.cursor)
    except InvalidCursor as exc:
        await close(
            inbound.websocket, POLICY_VIOLATION, f"invalid cursor: {exc}", cause="invalid_frame"
        )
        return None


async def _send(websocket: WebSocket, frame: object, cursor: Cursor) -> None:
    if isinstance(frame, ServerFrame):
        await websocket.send_text(frame.text(cursor.encode()))


@router.websocket("/jobs/{job_id}/stream")
async def job_stream(websocket: WebSocket, job_id: int) -> None:
    async with _opened(websocket) as inbound:
        if inbound is not None:
            await _job_stream(inbound, job_id)


async def _job_stream(inbound: Inbound, job_id: int) -> None:
    websocket = inbound.websocket
    cursor = await _subscribe(inbound)
    if cursor is None:
        return
    broker = get_broker(websocket)
    async with get_sessions(websocket)() as session:
        # A job of a project the caller is not in is closed exactly as a missing one.
        if not 1 <= job_id <= MAX_INT32 or not await to_the_end(
            _may_read(session, inbound, job_id)
        ):
            await close(
                websocket, POLICY_VIOLATION, f"job {job_id} does not exist", cause="unknown_job"
            )
            return
        # Subscribe before reading history, so nothing published meanwhile is missed.
        subscription = broker.subscribe([job_topic(job_id)])
        try:
            async for frame in job_history(
                session=session, logs=get_logs(websocket), job_id=job_id, cursor=cursor
            ):
                await _send(websocket, frame, cursor)
        except BaseException:
            subscription.close()
            raise
    await _live(inbound, subscription, cursor)


@router.websocket("/stream")
async def cluster_stream(websocket: WebSocket) -> None:
    async with _opened(websocket) as inbound:
        if inbound is not None:
            await _cluster_stream(inbound)


async def _cluster_stream(inbound: Inbound) -> None:
    websocket = inbound.websocket
    cursor = await _subscribe(inbound)
    if cursor is None:
        return
    subscription = get_broker(websocket).subscribe([CLUSTER_TOPIC])
    try:
        access, rows = await to_the_end(_cluster_history(inbound, cursor))
        for row in rows:
            cursor.event = row.id
            await _send(websocket, event_frame(row), cursor)
    except BaseException:
        subscription.close()
        raise
    visible = None if access.project_ids is None else _VisibleJobs(websocket, access)
    await _live(inbound, subscription, cursor, visible)


async def _cluster_history(inbound: Inbound, cursor: Cursor) -> tuple[Access, list[JobEvent]]:
    async with get_sessions(inbound.websocket)() as session:
        access = await load_access(session=session, principal=_principal_of(inbound))
        rows = await queries.latest_events(
            session=session,
            after_id=cursor.event,
            limit=CLUSTER_HISTORY_EVENTS,
            project_ids=access.project_ids,
        )
    return access, rows


class _VisibleJobs:
    """Whether a job's frames may go to this cluster stream: its project is one of the
    caller's (a job's project never changes, so each job is looked up once)."""

    def __init__(self, websocket: WebSocket, access: Access) -> None:
        self._websocket, self._access = websocket, access
        self._known: dict[int, bool] = {}

    async def __call__(self, frame: object) -> bool:
        job_id = getattr(frame, "job_id", None)
        if not isinstance(job_id, int):
            return True  # about no job
        if job_id not in self._known:
            project_id = await to_the_end(self._project_of(job_id))
            if len(self._known) >= _VISIBLE_CACHE:
                self._known.clear()
            self._known[job_id] = project_id is not None and (
                self._access.role_in(project_id) is not None
            )
        return self._known[job_id]

    async def _project_of(self, job_id: int) -> int | None:
        async with get_sessions(self._websocket)() as session:
            return await session.scalar(select(Job.project_id).where(Job.id == job_id))


_VISIBLE_CACHE = 10_000


def _principal_of(inbound: Inbound) -> Principal:
    principal: Principal = inbound.websocket.state.principal
    return principal


async def _may_read(session: AsyncSession, inbound: Inbound, job_id: int) -> bool:
    try:
        await job_scope(
            session=session,
            principal=_principal_of(inbound),
            job_id=job_id,
            needed=ProjectRole.viewer,
        )
    except NotFound:
        return False
    return True


async def _live(
    inbound: Inbound,
    subscription: Any,
    cursor: Cursor,
    visible: Callable[[object], Awaitable[bool]] | None = None,
) -> None:
    websocket = inbound.websocket
    reader = asyncio.create_task(_drain_client(inbound))
    try:
        await _send(websocket, HISTORY_END, cursor)
        while True:
            next_frame = asyncio.create_task(subscription.next())
            done, _ = await asyncio.wait({next_frame, reader}, return_when=asyncio.FIRST_COMPLETED)
            if reader in done:
                next_frame.cancel()
                return
            try:
                frame = next_frame.result()
            except SubscriberTooSlow as exc:
                await close(websocket, 1013, str(exc))
                return
            if visible is not None and not await visible(frame):
                continue
            if isinstance(frame, ServerFrame):
                frame = advance(cursor, frame)
            if frame is not None:
                await _send(websocket, frame, cursor)
    except WebSocketDisconnect:
        pass
    finally:
        reader.cancel()
        subscription.close()


async def _drain_client(inbound: Inbound) -> None:
    """Returns when the client goes away or breaks a limit; later client frames are not used."""
    while await inbound.text() is not None:
        pass


def document_frames(app: FastAPI) -> None:
    """Put the stream frames (`StreamFrame`, `Subscribe` and what they refer to) in the
    app's OpenAPI components, so that clients get their types from the one document.

    FastAPI describes HTTP operations only, and a websocket route is none: rather than a
    make-believe HTTP route, the generated document is extended once, when first built.
    """
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()  # cached by FastAPI after the first call
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        if "StreamFrame" not in components:
            _, definitions = models_json_schema(
                [(StreamFrame, "validation"), (Subscribe, "validation")],
                ref_template="#/components/schemas/{model}",
            )
            for name, definition in definitions.get("$defs", {}).items():
                components.setdefault(name, definition)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
