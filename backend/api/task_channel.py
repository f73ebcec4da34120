"""The runtime channel: a training process streams metrics and checkpoint reports up and
receives commands (checkpoint now) down."""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agents.protocol import (
    Ack,
    CheckpointAck,
    CheckpointSaved,
    CommandFailed,
    MetricBatch,
    Progress,
    TaskHello,
    TaskWelcome,
    runtime_message,
)
from backend import security
from backend.api.deps import (
    IngestorDep,
    ProgressDep,
    RuntimeLinksDep,
    SessionsDep,
    SettingsDep,
    ThroughputDep,
    websocket_principal,
)
from backend.api.frame_limits import MESSAGE_TOO_BIG, POLICY_VIOLATION, FrameLimits, Inbound, close
from backend.auth import TokenKind
from backend.checkpoints.service import record_reported_checkpoint
from backend.clients import service as clients
from backend.config import Settings
from backend.jobs import queries as jobs
from backend.jobs.models import Job, JobClient
from backend.jobs.spec import JobSpec
from backend.scheduling.launch import checkpoint_dir
from backend.scheduling.runtime_links import CommandOutcome, RuntimeLink

router = APIRouter()
log = logging.getLogger(__name__)


def frame_limits(settings: Settings) -> FrameLimits:
    return FrameLimits(
        max_bytes=settings.runtime_frame_bytes,
        frames_per_second=settings.runtime_frames_per_second,
        burst=settings.runtime_frame_burst,
    )


@router.websocket("/tasks/connect")
async def task_channel(
    websocket: WebSocket,
    settings: SettingsDep,
    sessions: SessionsDep,
    ingestor: IngestorDep,
    links: RuntimeLinksDep,
    progress: ProgressDep,
    throughput: ThroughputDep,
) -> None:
    await websocket.accept()
    principal = await websocket_principal(websocket)
    if principal is None or principal.kind is not TokenKind.task or principal.job_id is None:
        await close(
            websocket,
            POLICY_VIOLATION,
            "a task token (STRATA_TASK_TOKEN) is required",
            cause="unauthenticated",
        )
        return
    job_id = principal.job_id
    inbound = Inbound(websocket, frame_limits(settings), f"a runtime of job {job_id}")
    hello = await inbound.first(runtime_message, "task_hello")
    if hello is None:
        return
    if not isinstance(hello, TaskHello):
        await close(
            websocket, POLICY_VIOLATION, f"the first frame must be task_hello, got {hello.type}"
        )
        return
    inbound.peer = f"the runtime of job {job_id} {hello.task} attempt {hello.attempt}"
    async with sessions() as session:
        spec = await _spec_if_known(session, job_id, hello)
    if spec is None:
        security.refused(inbound.peer, "a task_hello for a task attempt its job does not have")
        await close(
            websocket,
            POLICY_VIOLATION,
            f"job {job_id} has no {hello.task} attempt {hello.attempt}",
            cause="unknown_attempt",
        )
        return
    directory = checkpoint_dir(spec, job_id, settings.checkpoints)

    link = RuntimeLink(job_id, hello.task, hello.attempt, websocket.send_text)
    key = (job_id, hello.task, hello.attempt)
    # The attempt's high-water mark is kept in memory while a channel of it is open.
    with ingestor.channel(key):
        await link.send(
            TaskWelcome(next_seq=await ingestor.stored_through(key) + 1).model_dump_json()
        )
        links.attach(link)
        try:
            while (message := await inbound.next(runtime_message)) is not None:
                if isinstance(message, MetricBatch):
                    if len(message.points) > settings.max_metric_batch_points:
                        await inbound.refuse(
                            MESSAGE_TOO_BIG,
                            f"metric batch of {len(message.points)} points is over the limit of "
                            f"{settings.max_metric_batch_points}",
                        )
                        break
                    throughput.note(job_id, hello.task, hello.attempt, message.points)
                    stored = await ingestor.submit(key, message.points)
                    await link.send(Ack(seq=stored).model_dump_json())
                elif isinstance(message, CheckpointSaved):
                    checkpoint_id = await _store_checkpoint(
                        sessions, job_id, directory, link, message
                    )
                    await link.send(CheckpointAck(name=message.name).model_dump_json())
                    links.resolve(message.command_id, CommandOutcome(checkpoint_id=checkpoint_id))
                elif isinstance(message, CommandFailed):
                    links.resolve(message.id, CommandOutcome(failure=message.reason))
                elif isinstance(message, Progress):
                    progress.note(job_id, hello.task, hello.attempt, message)
                elif isinstance(message, TaskHello):
                    await close(websocket, POLICY_VIOLATION, "task_hello may only be sent once")
                    break
        except WebSocketDisconnect:
            pass
        finally:
            links.detach(link)


async def _spec_if_known(session: AsyncSession, job_id: int, hello: TaskHello) -> JobSpec | None:
    """The job's spec, if it has the attempt the hello names: one of its tasks', or a
    session of its client coordinator (which reports as chief:0)."""
    task = await jobs.find_task(session=session, job_id=job_id, task=hello.task)
    if task is not None:
        return task.job.job_spec if hello.attempt <= task.attempt else None
    if hello.task != clients.CLIENT_TASK:
        return None
    client = await session.get(JobClient, job_id)
    if client is None or not 1 <= hello.attempt <= client.session:
        return None
    return (await session.get_one(Job, job_id)).job_spec


async def _store_checkpoint(
    sessions: async_sessionmaker[AsyncSession],
    job_id: int,
    directory: Path,
    link: RuntimeLink,
    saved: CheckpointSaved,
) -> int:
    async with sessions() as session:
        row = await record_reported_checkpoint(
            session=session, job_id=job_id, directory=directory, task=link.task, saved=saved
        )
        await session.commit()
        return row.id
