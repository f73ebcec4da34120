"""Live streams over websockets: one job's metrics, logs and events, and the cluster's events.

The first client frame subscribes, optionally from a cursor. The server sends history after
the cursor, a `history_end` frame, then live frames; every frame carries the cursor to resume
from. A subscriber that falls behind is closed (1013) with a reason; it resumes from its last
cursor and history fills the gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Literal

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from sqlalchemy import select

from backend.api.deps import websocket_principal
from backend.api.frames import close, first_frame
from backend.auth import TokenKind
from backend.jobs.models import Job, JobEvent
from backend.streams.broker import CLUSTER_TOPIC, Broker, SubscriberTooSlow, job_topic
from backend.streams.cursor import Cursor, InvalidCursor
from backend.streams.events import event_frame
from backend.streams.history import advance, job_history

router = APIRouter()

MAX_SUBSCRIBE_BYTES = 70_000
CLUSTER_HISTORY_EVENTS = 200


class Subscribe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["subscribe"]
    cursor: str | None = Field(default=None, max_length=65_536)


_subscribe_frame = TypeAdapter(Subscribe)


async def _subscribe(websocket: WebSocket) -> Cursor | None:
    """Authenticate, then read and check the first frame; close with a reason if bad."""
    await websocket.accept()
    principal = websocket_principal(websocket)
    if principal is None or principal.kind is not TokenKind.admin:
        await close(websocket, 1008, "an admin token is required (header or ?token=)")
        return None
    request = await first_frame(websocket, _subscribe_frame, "subscribe", MAX_SUBSCRIBE_BYTES)
    if request is None:
        return None
    try:
        return Cursor.decode(request.cursor)
    except InvalidCursor as exc:
        await close(websocket, 1008, f"invalid cursor: {exc}")
        return None


async def _send(websocket: WebSocket, frame: dict[str, Any], cursor: Cursor) -> None:
    # Metric values are made JSON-safe where frames are built (NaN and infinities as null).
    await websocket.send_text(json.dumps({**frame, "cursor": cursor.encode()}, allow_nan=False))


@router.websocket("/jobs/{job_id}/stream")
async def job_stream(websocket: WebSocket, job_id: int) -> None:
    cursor = await _subscribe(websocket)
    if cursor is None:
        return
    app = websocket.app
    broker: Broker = app.state.broker
    async with app.state.sessions() as session:
        if await session.get(Job, job_id) is None:
            await close(websocket, 1008, f"job {job_id} does not exist")
            return
        # Subscribe before reading history, so nothing published meanwhile is missed.
        subscription = broker.subscribe([job_topic(job_id)])
        try:
            async for frame in job_history(
                session=session, logs=app.state.controller.logs, job_id=job_id, cursor=cursor
            ):
                await _send(websocket, frame, cursor)
        except Exception:
            subscription.close()
            raise
    await _live(websocket, subscription, cursor)


@router.websocket("/stream")
async def cluster_stream(websocket: WebSocket) -> None:
    cursor = await _subscribe(websocket)
    if cursor is None:
        return
    app = websocket.app
    subscription = app.state.broker.subscribe([CLUSTER_TOPIC])
    async with app.state.sessions() as session:
        rows = list(
            await session.scalars(
                select(JobEvent)
                .where(JobEvent.id > cursor.event)
                .order_by(JobEvent.id.desc())
                .limit(CLUSTER_HISTORY_EVENTS)
            )
        )
    for row in reversed(rows):
        cursor.event = row.id
        await _send(websocket, event_frame(row), cursor)
    await _live(websocket, subscription, cursor)


async def _live(websocket: WebSocket, subscription: Any, cursor: Cursor) -> None:
    try:
        await _send(websocket, {"type": "history_end"}, cursor)
        reader = asyncio.create_task(_drain_client(websocket))
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
            trimmed = advance(cursor, frame)
            if trimmed is not None:
                await _send(websocket, trimmed, cursor)
    except WebSocketDisconnect:
        pass
    finally:
        subscription.close()


async def _drain_client(websocket: WebSocket) -> None:
    """Returns when the client goes away; later client frames are not used."""
    with contextlib.suppress(WebSocketDisconnect):
        while True:
            await websocket.receive_text()
