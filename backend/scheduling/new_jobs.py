"""New jobs stored: one many-row INSERT per table for a batch of submissions (the intake's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import cast

from sqlalchemy import Table, insert
from sqlalchemy.ext.asyncio import AsyncSession

from agents.vocabulary import format_task_name
from backend.db import utcnow
from backend.jobs.cluster_changes import note_job_names
from backend.jobs.events import EventKind
from backend.jobs.models import Job, Task
from backend.jobs.queries import job_view
from backend.jobs.schemas import JobRead, TaskRead
from backend.jobs.spec import ROLES, JobSpec
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.lifecycle import StoredEvent, record_events

WAITING = "waiting to be placed"  # a new job's reason


@dataclass(frozen=True)
class NewJob:
    """A validated job to store: where, by whom, and who its `created` event names (None:
    the session's actor, audit.name_actor)."""

    spec: JobSpec
    project_id: int
    submitted_by: str | None = None
    actor: str | None = None


async def insert_jobs(*, session: AsyncSession, jobs: Sequence[NewJob]) -> list[JobRead]:
    """Store these jobs as pending, each with one pending task per replica and its `created`
    event: a many-row INSERT per table for all of them, written as rows rather than ORM
    objects (building the objects would cost more than writing them). Their views, in
    order."""
    if not jobs:
        return []
    now = utcnow()
    job_rows = [
        {
            "project_id": new.project_id,
            "submitted_by": new.submitted_by,
            "name": new.spec.name,
            "strategy": new.spec.strategy,
            "status": JobStatus.pending,
            "reason": WAITING,
            "spec": new.spec.model_dump(mode="json"),
            "priority": new.spec.priority,
            "restart_count": 0,
            "failure_count": 0,
            "created_at": now,
            "updated_at": now,
            "version": 1,
        }
        for new in jobs
    ]
    job_table = cast(Table, Job.__table__)
    ids = list(
        await session.scalars(
            insert(job_table).returning(job_table.c.id, sort_by_parameter_order=True), job_rows
        )
    )
    names = [
        [(role, index) for role in ROLES for index in range(new.spec.replicas.of(role).count)]
        for new in jobs
    ]
    task_rows = [
        {
            "job_id": job_id,
            "role": role,
            "index": index,
            "status": TaskStatus.pending,
            "gpu_indices": [],
            "attempt": 0,
            "failure_count": 0,
            "created_at": now,
        }
        for job_id, tasks in zip(ids, names, strict=True)
        for role, index in tasks
    ]
    await session.execute(insert(cast(Table, Task.__table__)), task_rows)
    await record_events(
        session=session,
        events=[
            StoredEvent(
                job_id=job_id,
                kind=EventKind.created,
                message=f"submitted with {len(tasks)} tasks",
                actor=new.actor,
                at=now,
            )
            for job_id, tasks, new in zip(ids, names, jobs, strict=True)
        ],
    )
    # Hostless, the new tasks are on no host's view; the board learns the jobs' names.
    note_job_names(session, {job_id: new.spec.name for job_id, new in zip(ids, jobs, strict=True)})
    return [
        job_view(
            SimpleNamespace(id=job_id, **row, slurm_job_id=None, started_at=None, finished_at=None),
            [_new_task_read(role, index) for role, index in tasks],
        )
        for job_id, row, tasks in zip(ids, job_rows, names, strict=True)
    ]


def _new_task_read(role: str, index: int) -> TaskRead:
    return TaskRead(
        name=format_task_name(role, index),
        role=role,
        index=index,
        status=TaskStatus.pending,
        host=None,
        port=None,
        gpus=[],
        pid=None,
        attempt=0,
        failure_count=0,
        exit_code=None,
        started_at=None,
        finished_at=None,
    )
