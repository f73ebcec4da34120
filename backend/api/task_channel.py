"""The runtime channel: a training process streams metrics up and receives commands."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import ValidationError
from sqlalchemy import select

from agents.protocol import Ack, MetricBatch, TaskHello, TaskWelcome, runtime_message
from backend.api.deps import websocket_principal
from backend.auth import TokenKind
from backend.jobs.models import Task
from backend.streams.ingest import Ingestor

router = APIRouter()
log = logging.getLogger(__name__)

HELLO_TIMEOUT = 10.0
MAX_FRAME_BYTES = 8 << 20


async def _refuse(websocket: WebSocket, reason: str) -> None:
    with contextlib.suppress(Exception):
        await websocket.close(1008, reason[:120])


@router.websocket("/tasks/connect")
async def task_channel(websocket: WebSocket) -> None:
    await websocket.accept()
    principal = websocket_principal(websocket)
    if principal is None or principal.kind is not TokenKind.task or principal.job_id is None:
        await _refuse(websocket, "a task token (STRATA_TASK_TOKEN) is required")
        return
    job_id = principal.job_id
    try:
        hello = runtime_message.validate_json(
            await asyncio.wait_for(websocket.receive_text(), HELLO_TIMEOUT)
        )
    except ValidationError as exc:
        await _refuse(websocket, f"invalid task_hello: {exc.errors()[0]['msg']}")
        return
    except (TimeoutError, WebSocketDisconnect, KeyError):
        await _refuse(websocket, "expected a task_hello frame")
        return
    if not isinstance(hello, TaskHello):
        await _refuse(websocket, f"the first frame must be task_hello, got {hello.type}")
        return
    role, index = hello.task.split(":")
    async with websocket.app.state.sessions() as session:
        task = await session.scalar(
            select(Task).where(Task.job_id == job_id, Task.role == role, Task.index == int(index))
        )
    if task is None or hello.attempt > task.attempt:
        await _refuse(websocket, f"job {job_id} has no {hello.task} attempt {hello.attempt}")
        return

    ingestor: Ingestor = websocket.app.state.ingestor
    key = (job_id, hello.task, hello.attempt)
    await websocket.send_text(
        TaskWelcome(next_seq=await ingestor.stored_through(key) + 1).model_dump_json()
    )
    try:
        while True:
            raw = await websocket.receive_text()
            if len(raw) > MAX_FRAME_BYTES:
                await websocket.close(1009, f"frame over {MAX_FRAME_BYTES} bytes")
                return
            try:
                message = runtime_message.validate_json(raw)
            except ValidationError as exc:
                await websocket.close(1002, f"invalid frame: {exc.errors()[0]['msg']}"[:120])
                return
            if isinstance(message, MetricBatch):
                stored = await ingestor.submit(key, message.points)
                await websocket.send_text(Ack(seq=stored).model_dump_json())
    except WebSocketDisconnect:
        pass
