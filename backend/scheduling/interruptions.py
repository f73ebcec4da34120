"""Interrupting a job on purpose: a checkpoint at the writer's next step boundary (training
then holds), the job's tasks stop, and it waits to be placed again, resuming from that
checkpoint. Without a checkpoint by the deadline it stops anyway, to resume from its last
backup, and says so. An interruption is not a failure: it spends no restart budget, sets no
backoff and counts in no `restart_count`.

The checkpoint is waited for outside the controller's lock (`take_checkpoint`); the change
of status is one transaction under it (`suspend`, `resume`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.checkpoints.service import checkpoint_writer, get_checkpoint
from backend.errors import Conflict, NotFound
from backend.jobs import queries
from backend.jobs.actions import suspend_refusal
from backend.jobs.models import Job, JobClient
from backend.jobs.states import JobStatus
from backend.scheduling.lifecycle import transition_job
from backend.scheduling.restarts import unplace_tasks
from backend.scheduling.runtime_links import RuntimeLinks
from backend.scheduling.transaction import Transaction
from backend.streams.models import MetricPoint

DEFAULT_DEADLINE_SECONDS = 60.0
# The writer holds its training this long past the deadline: time for the server to stop it.
HOLD_MARGIN_SECONDS = 30.0


@dataclass(frozen=True)
class ResumePoint:
    """What an interrupted job resumes from: the checkpoint taken for the interruption (by
    that attempt of that task), or why none was (it then resumes from its last backup)."""

    writer: str | None = None
    attempt: int | None = None
    checkpoint: str | None = None
    step: int | None = None
    missing: str | None = None

    def describe(self) -> str:
        if self.checkpoint is not None:
            return f"checkpoint {self.checkpoint} at step {self.step}"
        return f"no checkpoint ({self.missing}); it resumes from its last backup"

    def data(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "step": self.step, "missing": self.missing}


async def take_checkpoint(
    *, session: AsyncSession, links: RuntimeLinks, job_id: int, deadline: float
) -> ResumePoint:
    """Asks the job's checkpoint writer for the interruption's checkpoint and waits at most
    `deadline` seconds for it. Holds no database connection while it waits."""
    job = await queries.get_job(session=session, job_id=job_id)
    try:
        writer = checkpoint_writer(job, await session.get(JobClient, job_id))
    except Conflict as no_writer:
        return ResumePoint(missing=str(no_writer))
    finally:
        await session.commit()
    name, attempt = writer
    link = links.find(job_id, name, attempt)
    if link is None:
        return ResumePoint(name, attempt, missing=f"the runtime of {name} is not connected")
    try:
        command_id, answer = await links.send_command(
            link, "interrupt", hold_seconds=deadline + HOLD_MARGIN_SECONDS
        )
    except Exception as exc:  # the runtime's socket closed under us
        return ResumePoint(name, attempt, missing=f"{name} could not be asked: {exc!r}")
    try:
        async with asyncio.timeout(deadline):
            outcome = await answer
    except TimeoutError:
        return ResumePoint(name, attempt, missing=f"{name} wrote none within {deadline:g}s")
    finally:
        links.forget(command_id)
    if outcome.failure is not None or outcome.checkpoint_id is None:
        return ResumePoint(name, attempt, missing=f"{name} could not write it: {outcome.failure}")
    row = await get_checkpoint(session=session, checkpoint_id=outcome.checkpoint_id)
    await session.commit()
    return ResumePoint(name, attempt, PurePath(row.path).name, row.step)


async def steps_lost(session: AsyncSession, job_id: int, point: ResumePoint) -> int | None:
    """Steps the writer reported past the interruption's checkpoint (None without one)."""
    if point.checkpoint is None or point.step is None:
        return None
    reported = await session.scalar(
        select(func.max(MetricPoint.step)).where(
            MetricPoint.job_id == job_id,
            MetricPoint.task == point.writer,
            MetricPoint.attempt == point.attempt,
        )
    )
    return max(0, (reported or 0) - point.step)


async def _interruptible_job(tx: Transaction, job_id: int) -> Job:
    job = await tx.session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    refusal = suspend_refusal(job.status, job.job_spec)
    if refusal is not None:
        raise Conflict(f"job {job_id} cannot be suspended: {refusal}")
    return job


async def suspend(tx: Transaction, *, job_id: int, point: ResumePoint) -> None:
    """Stop the job's tasks and keep it off the cluster until resumed (no quota counts it:
    it holds no host)."""
    job = await _interruptible_job(tx, job_id)
    lost = await steps_lost(tx.session, job_id, point)
    reason = f"suspended by request; resumes from {point.describe()}"
    if lost is not None:
        reason += f" ({lost} step{'' if lost == 1 else 's'} lost)"
    await transition_job(
        session=tx.session,
        job=job,
        to=JobStatus.suspended,
        reason=reason,
        data={"interruption": "suspend", **point.data(), "steps_lost": lost},
    )
    await unplace_tasks(tx=tx, job=job, reason=reason, failure=False)
    tx.observe(lambda metrics: metrics.interruptions.labels(cause="suspend").inc())


async def resume(tx: Transaction, *, job_id: int) -> None:
    """A suspended job waits for room again, to continue from where it was suspended."""
    job = await tx.session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    if job.status is not JobStatus.suspended:
        raise Conflict(f"job {job_id} is {job.status.value}; only a suspended job can be resumed")
    await transition_job(
        session=tx.session, job=job, to=JobStatus.pending, reason="resumed by request"
    )
