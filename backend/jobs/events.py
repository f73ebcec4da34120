"""What a job event records: the `kind` of a job_events row, as clients see it in streams;
and one event recorded (a status change is the lifecycle's, in backend.scheduling)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from backend.db import utcnow
from backend.jobs.models import Job, JobEvent


class EventKind(StrEnum):
    """The kinds of job event (stored as these short strings: no migration to add one)."""

    created = "created"  # the job was submitted
    status = "status"  # the job's status changed (from_status → to_status, the reason)
    task_status = "task_status"  # a task started, exited, was stopped or lost its host
    restart = "restart"  # tasks are restarted, by the restart policy or by request
    evaluator = "evaluator"  # the sidecar evaluator was requested, started or stopped
    checkpoint = "checkpoint"  # a runtime reported a checkpoint (streams carry it as its own frame)
    client = "client"  # a client coordinator attached, detached or was found gone
    health = "health"  # a hang or a straggler was found: what was seen (the evidence in data)


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
    backend.scheduling.lifecycle.transition_job)."""
    event = JobEvent(
        job_id=job.id, at=utcnow(), kind=kind, task=task, message=message, data=data or {}
    )
    session.add(event)
    if flush:
        await session.flush()
    return event
