"""Reading typed frames from a websocket, closing it with a reason when a frame is bad."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TypeVar

from fastapi import WebSocket, WebSocketDisconnect
from pydantic import TypeAdapter, ValidationError
from starlette.websockets import WebSocketDisconnected

T = TypeVar("T")

FIRST_FRAME_TIMEOUT = 10.0


async def close(websocket: WebSocket, code: int, reason: str) -> None:
    """Close with a reason (cut to what a close frame can carry), whatever state it is in."""
    with contextlib.suppress(Exception):
        await websocket.close(code, reason[:120])


def _problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])


async def first_frame(
    websocket: WebSocket, adapter: TypeAdapter[T], what: str, max_bytes: int = 1 << 20
) -> T | None:
    """The frame that opens a session; on silence or garbage, close 1008 and return None."""
    try:
        raw = await asyncio.wait_for(websocket.receive_text(), FIRST_FRAME_TIMEOUT)
        if len(raw) > max_bytes:
            await close(websocket, 1009, f"{what} frame over {max_bytes} bytes")
            return None
        return adapter.validate_json(raw)
    except ValidationError as exc:
        await close(websocket, 1008, f"invalid {what} frame: {_problem(exc)}")
    except (TimeoutError, WebSocketDisconnect, KeyError):
        await close(websocket, 1008, f"expected a {what} frame")
    return None


async def next_frame(websocket: WebSocket, adapter: TypeAdapter[T], max_bytes: int) -> T | None:
    """The next frame of a session; an oversized (1009) or malformed (1002) one closes it.

    None as well when this side closed the socket meanwhile (a newer connection replaced it).
    """
    try:
        raw = await websocket.receive_text()
    except WebSocketDisconnected:
        return None
    if len(raw) > max_bytes:
        await close(websocket, 1009, f"frame over {max_bytes} bytes")
        return None
    try:
        return adapter.validate_json(raw)
    except ValidationError as exc:
        await close(websocket, 1002, f"invalid frame: {_problem(exc)}")
        return None
