"""The one place where a job's status changes: legality, timestamps and the event record."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from backend.db import utcnow
from backend.errors import Conflict
from backend.jobs.events import EventKind
from backend.jobs.models import Job, JobEvent
from backend.jobs.states import JobStatus, can_transition


class IllegalTransition(Conflict):
    def __init__(self, job: Job, target: JobStatus) -> None:
        super().__init__(f"job {job.id} is {job.status.value}; it cannot become {target.value}")
        self.current = job.status
        self.target = target


async def transition_job(
    *,
    session: AsyncSession,
    job: Job,
    to: JobStatus,
    reason: str | None = None,
    data: dict[str, Any] | None = None,
    flush: bool = True,
) -> JobEvent:
    """Move a job to a new status, or raise IllegalTransition (409) and change nothing.
    flush=False leaves the writes to the caller's next flush (or its commit): a pass that
    changes many jobs writes them in a few statements instead of a flush per event."""
    if not can_transition(job.status, to):
        raise IllegalTransition(job, to)
    now = utcnow()
    event = JobEvent(
        job_id=job.id,
        at=now,
        kind=EventKind.status,
        from_status=job.status.value,
        to_status=to.value,
        message=reason,
        data=data or {},
    )
    job.status = to
    job.reason = reason
    job.updated_at = now
    if to is JobStatus.running and job.started_at is None:
        job.started_at = now
    if to.is_terminal:
        job.finished_at = now
    session.add(event)
    if flush:
        await session.flush()
    return event


async def record_event(
    *,
    session: AsyncSession,
    job: Job,
    kind: EventKind,
    message: str,
    task: str | None = None,
    data: dict[str, Any] | None = None,
    flush: bool = True,
) -> JobEvent:
    """Record something that happened to a job without changing its status (flush: as in
    transition_job)."""
    event = JobEvent(
        job_id=job.id, at=utcnow(), kind=kind, task=task, message=message, data=data or {}
    )
    session.add(event)
    if flush:
        await session.flush()
    return event
