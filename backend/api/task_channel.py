"""The runtime channel: a training process streams metrics up and receives commands."""

from __future__ import annotations

import logging

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from sqlalchemy import select

from agents.protocol import Ack, MetricBatch, TaskHello, TaskWelcome, runtime_message
from backend.api.deps import websocket_principal
from backend.api.frames import close, first_frame, next_frame
from backend.auth import TokenKind
from backend.jobs.models import Task
from backend.streams.ingest import Ingestor

router = APIRouter()
log = logging.getLogger(__name__)

MAX_FRAME_BYTES = 8 << 20


@router.websocket("/tasks/connect")
async def task_channel(websocket: WebSocket) -> None:
    await websocket.accept()
    principal = websocket_principal(websocket)
    if principal is None or principal.kind is not TokenKind.task or principal.job_id is None:
        await close(websocket, 1008, "a task token (STRATA_TASK_TOKEN) is required")
        return
    job_id = principal.job_id
    hello = await first_frame(websocket, runtime_message, "task_hello")
    if hello is None:
        return
    if not isinstance(hello, TaskHello):
        await close(websocket, 1008, f"the first frame must be task_hello, got {hello.type}")
        return
    role, index = hello.task.split(":")
    async with websocket.app.state.sessions() as session:
        task = await session.scalar(
            select(Task).where(Task.job_id == job_id, Task.role == role, Task.index == int(index))
        )
    if task is None or hello.attempt > task.attempt:
        await close(websocket, 1008, f"job {job_id} has no {hello.task} attempt {hello.attempt}")
        return

    ingestor: Ingestor = websocket.app.state.ingestor
    key = (job_id, hello.task, hello.attempt)
    await websocket.send_text(
        TaskWelcome(next_seq=await ingestor.stored_through(key) + 1).model_dump_json()
    )
    try:
        while (
            message := await next_frame(websocket, runtime_message, MAX_FRAME_BYTES)
        ) is not None:
            if isinstance(message, MetricBatch):
                stored = await ingestor.submit(key, message.points)
                await websocket.send_text(Ack(seq=stored).model_dump_json())
    except WebSocketDisconnect:
        pass
