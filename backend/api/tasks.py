"""Routes about one task of a job: its logs, and restarting it."""

from __future__ import annotations

import functools
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from agents.vocabulary import TaskNameText
from backend.api.audit import ClientSource
from backend.api.deps import (
    ActorPrincipal,
    ControllerDep,
    JobId,
    JobMember,
    JobReader,
    LogStoreDep,
    SessionDep,
)
from backend.audit import service as audit
from backend.audit.actions import AuditAction
from backend.errors import ROUTER_ERRORS, NotFound, closed_query, error_responses
from backend.jobs import queries
from backend.jobs.schemas import JobRead, LogPage
from backend.scheduling import restarts

router = APIRouter(
    prefix="/jobs/{job_id}/tasks",
    tags=["tasks"],
    responses=ROUTER_ERRORS,
    dependencies=[Depends(closed_query)],
)

TaskName = Annotated[TaskNameText, Path(description="role:index, e.g. worker:1")]


@router.post("/{task}/restart", response_model=JobRead, responses=error_responses(404, 409))
async def restart_task(
    job_id: JobId,
    task: TaskName,
    session: SessionDep,
    controller: ControllerDep,
    principal: ActorPrincipal,
    _: JobMember,
    source: ClientSource,
) -> JobRead:
    """Restart one task on its host and port (with the tasks its role restarts along with it)."""
    await controller.apply(
        audit.audited(
            functools.partial(restarts.request_task_restart, job_id=job_id, task_name=task),
            principal=principal,
            source=source,
            action=AuditAction.task_restart,
            job_id=job_id,
            target=task,
        )
    )
    return await queries.read_job(session=session, job_id=job_id)


@router.get("/{task}/logs", response_model=LogPage, responses=error_responses(404))
async def read_task_logs(
    job_id: JobId,
    task: TaskName,
    session: SessionDep,
    logs: LogStoreDep,
    _: JobReader,
    attempt: Annotated[int | None, Query(ge=0, le=10_000, description="Latest when unset.")] = None,
    offset: Annotated[int, Query(ge=0, le=2**40, description="First line to return.")] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    tail: Annotated[int | None, Query(ge=1, le=10_000, description="Last N lines.")] = None,
) -> LogPage:
    """A task's log lines, by line offset or the last N lines, for one attempt."""
    job = await queries.get_job(session=session, job_id=job_id)
    found = next((t for t in job.tasks if t.name == task), None)
    if found is None:
        raise NotFound(f"job {job_id} has no task {task}")
    chosen = found.attempt if attempt is None else attempt
    if chosen > found.attempt:
        raise NotFound(
            f"{task} of job {job_id} has no attempt {chosen} (latest is {found.attempt})"
        )
    page = logs.read(job_id, task, chosen, offset=offset, limit=limit, tail=tail)
    return LogPage(
        task=task,
        attempt=chosen,
        first_line=page.first_line,
        lines=page.lines,
        total_lines=page.total_lines,
    )
