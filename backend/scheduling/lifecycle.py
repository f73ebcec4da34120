"""The one place where a job's status changes: legality, timestamps and the event record;
and events written many to a statement, named and published as flushed ones are."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, insert
from sqlalchemy.ext.asyncio import AsyncSession

from backend.audit.service import ACTOR
from backend.db import utcnow
from backend.errors import Conflict
from backend.jobs.events import EventKind
from backend.jobs.models import Job, JobEvent
from backend.jobs.states import JobStatus, can_transition
from backend.streams.publishing import publish_after_commit


class IllegalTransition(Conflict):
    def __init__(self, job_id: int, current: JobStatus, target: JobStatus) -> None:
        super().__init__(f"job {job_id} is {current.value}; it cannot become {target.value}")
        self.current = current
        self.target = target


@dataclass(frozen=True)
class StatusChange:
    """A job's change of status: its columns' new values, and the event that records it."""

    values: dict[str, Any]
    event: StoredEvent


def status_change(
    *,
    job_id: int,
    current: JobStatus,
    started_at: datetime | None,
    to: JobStatus,
    reason: str | None,
    now: datetime,
    data: dict[str, Any] | None = None,
) -> StatusChange:
    """The one writer of a job's status, for a loaded job (`transition_job`) and for a job
    read as a plain row (scheduling/started.py): IllegalTransition (409) unless `to` may
    follow `current`; else the status, reason and times to write, and the event."""
    if not can_transition(current, to):
        raise IllegalTransition(job_id, current, to)
    values: dict[str, Any] = {"status": to, "reason": reason, "updated_at": now}
    if to is JobStatus.running and started_at is None:
        values["started_at"] = now
    if to.is_terminal:
        values["finished_at"] = now
    event = StoredEvent(
        job_id=job_id,
        kind=EventKind.status,
        message=reason,
        from_status=current.value,
        to_status=to.value,
        data=data or {},
        at=now,
    )
    return StatusChange(values, event)


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
    change = status_change(
        job_id=job.id,
        current=job.status,
        started_at=job.started_at,
        to=to,
        reason=reason,
        data=data,
        now=utcnow(),
    )
    for column, value in change.values.items():
        setattr(job, column, value)
    stored = change.event
    event = JobEvent(
        job_id=stored.job_id,
        at=stored.at,
        kind=stored.kind,
        from_status=stored.from_status,
        to_status=stored.to_status,
        message=stored.message,
        data=stored.data,
    )
    session.add(event)
    if flush:
        await session.flush()
    return event


@dataclass(frozen=True)
class StoredEvent:
    """An event written by `record_events`: its row's values, without an ORM object."""

    job_id: int
    kind: str
    message: str | None
    task: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    at: datetime = field(default_factory=utcnow)
    from_status: str | None = None
    to_status: str | None = None
    actor: str | None = None
    id: int = 0  # the row's, once written


async def record_events(
    *, session: AsyncSession, events: Sequence[StoredEvent]
) -> list[StoredEvent]:
    """Record many events that change no status in one INSERT ... RETURNING, cheaper
    than the ORM's flush for many task starts. They name the session's actor (as a
    flush would, audit.name_actor) and are published once the session commits, as flushed
    ones are."""
    if not events:
        return []
    actor = session.info.get(ACTOR)
    rows = [
        {
            "job_id": e.job_id,
            "at": e.at,
            "kind": e.kind,
            "task": e.task,
            "from_status": e.from_status,
            "to_status": e.to_status,
            "message": e.message,
            "data": e.data,
            "actor": e.actor if e.actor is not None else actor,
        }
        for e in events
    ]
    table = cast(Table, JobEvent.__table__)
    ids = await session.scalars(
        insert(table).returning(table.c.id, sort_by_parameter_order=True), rows
    )
    stored = [
        StoredEvent(**{**row, "id": event_id}) for row, event_id in zip(rows, ids, strict=True)
    ]
    publish_after_commit(session.sync_session, stored)
    return stored
