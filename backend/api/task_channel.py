"""The runtime channel: a training process streams metrics and checkpoint reports up and
receives commands (checkpoint now) down."""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from sqlalchemy import select

from agents.protocol import (
    Ack,
    CheckpointAck,
    CheckpointSaved,
    CommandFailed,
    MetricBatch,
    TaskHello,
    TaskWelcome,
    runtime_message,
)
from backend.api.deps import websocket_principal
from backend.api.frames import close, first_frame, next_frame
from backend.auth import TokenKind
from backend.checkpoints.service import record_checkpoint
from backend.jobs.models import Job, Task
from backend.jobs.spec import JobSpec
from backend.scheduling.launch import checkpoint_dir
from backend.scheduling.runtime_links import CommandOutcome, RuntimeLink, RuntimeLinks
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
    app = websocket.app
    async with app.state.sessions() as session:
        task = await session.scalar(
            select(Task).where(Task.job_id == job_id, Task.role == role, Task.index == int(index))
        )
        job = await session.get(Job, job_id)
    if task is None or job is None or hello.attempt > task.attempt:
        await close(websocket, 1008, f"job {job_id} has no {hello.task} attempt {hello.attempt}")
        return
    spec = JobSpec.model_validate(job.spec, strict=False)
    directory = checkpoint_dir(spec, job_id, app.state.settings.checkpoints)

    ingestor: Ingestor = app.state.ingestor
    links: RuntimeLinks = app.state.runtimes
    link = RuntimeLink(job_id, hello.task, hello.attempt, websocket.send_text)
    key = (job_id, hello.task, hello.attempt)
    await link.send(TaskWelcome(next_seq=await ingestor.stored_through(key) + 1).model_dump_json())
    links.attach(link)
    try:
        while (
            message := await next_frame(websocket, runtime_message, MAX_FRAME_BYTES)
        ) is not None:
            if isinstance(message, MetricBatch):
                stored = await ingestor.submit(key, message.points)
                await link.send(Ack(seq=stored).model_dump_json())
            elif isinstance(message, CheckpointSaved):
                checkpoint_id = await _store_checkpoint(websocket, job_id, directory, link, message)
                await link.send(CheckpointAck(name=message.name).model_dump_json())
                links.resolve(message.command_id, CommandOutcome(checkpoint_id=checkpoint_id))
            elif isinstance(message, CommandFailed):
                links.resolve(message.id, CommandOutcome(failure=message.reason))
    except WebSocketDisconnect:
        pass
    finally:
        links.detach(link)


async def _store_checkpoint(
    websocket: WebSocket, job_id: int, directory: Path, link: RuntimeLink, saved: CheckpointSaved
) -> int:
    async with websocket.app.state.sessions() as session:
        job = await session.get_one(Job, job_id)
        row = await record_checkpoint(
            session=session, job=job, directory=directory, task=link.task, saved=saved
        )
        await session.commit()
        return row.id
