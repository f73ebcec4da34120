"""Checkpoints of a job: the list, and checkpoint-now."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

from fastapi import APIRouter, Depends, Query

from backend.api.audit import ClientSource
from backend.api.deps import (
    ActorPrincipal,
    JobId,
    JobMember,
    JobReader,
    RuntimeLinksDep,
    SessionDep,
)
from backend.audit import service as audit
from backend.audit.actions import AuditAction
from backend.checkpoints import service
from backend.checkpoints.schemas import CheckpointNow, CheckpointRead, checkpoint_read
from backend.db import utcnow
from backend.errors import (
    ROUTER_ERRORS,
    Conflict,
    TaskFailed,
    TaskTimeout,
    closed_query,
    error_responses,
)
from backend.jobs import queries as jobs
from backend.jobs.models import JobClient

router = APIRouter(
    prefix="/jobs/{job_id}",
    tags=["checkpoints"],
    responses=ROUTER_ERRORS,
    dependencies=[Depends(closed_query)],
)


@router.get(
    "/checkpoints",
    response_model=list[CheckpointRead],
    responses=error_responses(404),
)
async def list_checkpoints(
    job_id: JobId,
    session: SessionDep,
    _: JobReader,
    include_deleted: Annotated[
        bool, Query(description="Also those the retention policy deleted.")
    ] = False,
) -> list[CheckpointRead]:
    """The checkpoints the job's runtime reported, newest first."""
    rows = await service.list_checkpoints(
        session=session, job_id=job_id, include_deleted=include_deleted
    )
    return [checkpoint_read(row) for row in rows]


@router.post(
    "/checkpoint",
    response_model=CheckpointNow,
    responses=error_responses(404, 409, 502, 504),
)
async def checkpoint_now(
    job_id: JobId,
    session: SessionDep,
    links: RuntimeLinksDep,
    principal: ActorPrincipal,
    _: JobMember,
    source: ClientSource,
    wait_seconds: Annotated[
        float, Query(gt=0, le=300, description="How long to wait for the checkpoint.")
    ] = 30.0,
) -> CheckpointNow:
    """Ask the job's chief to write a checkpoint at its next step boundary, and answer when
    it has been written (the job's stream also gets a `checkpoint` frame)."""
    job = await jobs.get_job(session=session, job_id=job_id)
    writer = service.checkpoint_writer(job, await session.get(JobClient, job_id))
    task = writer.name
    link = links.find(job_id, task, writer.attempt)
    if link is None:
        raise Conflict(
            f"the runtime of {task} is not connected: the training script must pass "
            "runtime.callbacks() to fit (or it is still starting)"
        )
    # Recorded once the request can be sent; committed now because the request must not hold
    # a database connection (SQLite allows one writer) while it waits on the training process.
    await audit.record_job_change(
        session=session,
        principal=principal,
        source=source,
        action=AuditAction.job_checkpoint,
        job_id=job_id,
        target=task,
    )
    await session.commit()
    requested_at, started = utcnow(), time.monotonic()
    command_id, answer = await links.send_command(link, "checkpoint")
    try:
        async with asyncio.timeout(wait_seconds):
            outcome = await answer
    except TimeoutError:
        raise TaskTimeout(
            f"{task} wrote no checkpoint within {wait_seconds:g}s (command {command_id});"
            " if it is written later it will be listed"
        ) from None
    finally:
        links.forget(command_id)
    if outcome.failure is not None or outcome.checkpoint_id is None:
        raise TaskFailed(f"{task} could not write the checkpoint: {outcome.failure}")
    row = await service.get_checkpoint(session=session, checkpoint_id=outcome.checkpoint_id)
    return CheckpointNow(
        command_id=command_id,
        task=task,
        requested_at=requested_at,
        seconds=round(time.monotonic() - started, 3),
        checkpoint=checkpoint_read(row),
    )
