"""Jobs: submit, list, read, cancel, restart, suspend and resume."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, status
from sqlalchemy.ext.asyncio import AsyncSession

from backend.api.audit import ClientSource
from backend.api.code import get_code_store
from backend.api.deps import (
    ActorPrincipal,
    CallerAccess,
    ControllerDep,
    IntakeDep,
    JobId,
    JobMember,
    JobReader,
    ProgressDep,
    RuntimeLinksDep,
    SessionDep,
    SlurmDep,
    UsageDep,
)
from backend.audit import service as audit
from backend.audit.actions import AuditAction
from backend.auth import Principal
from backend.errors import (
    ROUTER_ERRORS,
    Conflict,
    FieldIssue,
    InvalidInput,
    closed_query,
    error_responses,
)
from backend.jobs import queries
from backend.jobs.actions import suspend_refusal
from backend.jobs.schemas import JobEventRead, JobPage, JobRead
from backend.jobs.spec import (
    MAX_TAGS,
    TAG_PATTERN,
    JobSpec,
    parse_spec_document,
    validate_spec,
)
from backend.jobs.states import JobStatus
from backend.scheduling import interruptions, restarts, task_events
from backend.scheduling.controller import Change, Controller
from backend.scheduling.quotas import check_priority
from backend.slurm.admission import admit
from backend.streams.progress import ProgressBoard
from backend.teams import service as teams_service
from backend.teams.roles import TEAM_NAME_PATTERN

router = APIRouter(
    prefix="/jobs", tags=["jobs"], responses=ROUTER_ERRORS, dependencies=[Depends(closed_query)]
)


_SPEC_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/JobSpec"}},
            "application/yaml": {"schema": {"$ref": "#/components/schemas/JobSpec"}},
        },
    }
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=JobRead,
    openapi_extra=_SPEC_BODY,
    responses=error_responses(413, 415),
)
async def submit_job(
    request: Request,
    session: SessionDep,
    intake: IntakeDep,
    slurm: SlurmDep,
    principal: ActorPrincipal,
    access: CallerAccess,
    source: ClientSource,
) -> JobRead:
    """Submit a job spec (JSON or YAML) to a project you are a member of (spec.project); it
    waits as pending until it can be placed."""
    # A batch of submissions about to be written waits a little for this one (scheduling.intake).
    with intake.arriving():
        body = await request.body()  # within STRATA_MAX_REQUEST_BYTES (api.body.BodyLimit)
        spec = validate_spec(parse_spec_document(body, request.headers.get("content-type")))
        if spec.code is not None and get_code_store(request).size(spec.code.sha256) is None:
            raise InvalidInput(
                [FieldIssue("code.sha256", f"no code bundle {spec.code.sha256}: upload it first")]
            )

        project = await teams_service.project_for_submit(
            session=session, access=access, name=spec.project
        )
        check_priority(project=project, priority=spec.priority)
        await admit(
            spec,
            settings=request.app.state.settings,
            commands=None if slurm is None else slurm.commands,
            project_account=project.slurm_account,  # what sbatch will be given
        )
        # The connection goes back to the pool before the wait for the controller's lock: many
        # submissions waiting there must not hold every connection the controller needs to write.
        await session.rollback()

    # Written with the other submissions waiting for the controller's lock (scheduling.intake).
    job = await intake.submit(spec, access=access, principal=principal, source=source)
    if slurm is not None and spec.slurm is not None:
        slurm.wake()
    return job  # its view as committed: nothing is read again


@router.get("", response_model=JobPage, responses=error_responses(404))
async def list_jobs(
    session: SessionDep,
    access: CallerAccess,
    progress: ProgressDep,
    project: Annotated[
        str | None, Query(pattern=TEAM_NAME_PATTERN, description="Only this project's jobs.")
    ] = None,
    status_: Annotated[
        list[JobStatus], Query(alias="status", description="Only jobs in these states.")
    ] = [],  # noqa: B006 - FastAPI copies query defaults
    # A job's name is exactly what the spec allows (a NUL byte would reach PostgreSQL).
    name: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9._-]{1,63}$")] = None,
    tag: Annotated[
        list[str],
        Query(
            max_length=MAX_TAGS,
            description="Only jobs with every one of these tags.",
        ),
    ] = [],  # noqa: B006 - FastAPI copies query defaults
    q: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=200,
            pattern=r"^[^\x00]*$",
            description="Only jobs whose name or description holds this text (any case).",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
) -> JobPage:
    """List the jobs of your projects, newest first, filtered by project, status, name, tags
    and text, a page at a time."""
    for value in tag:
        if not TAG_PATTERN.fullmatch(value):
            raise InvalidInput([FieldIssue("tag", f"not a tag: {value!r} (see the spec's tags)")])
    project_ids = access.project_ids
    if project is not None:
        found = await teams_service.visible_project(session=session, access=access, name=project)
        project_ids = frozenset({found.id})
    items, total = await queries.list_jobs(
        session=session,
        statuses=status_,
        name=name,
        tags=tag,
        text=q,
        project_ids=project_ids,
        limit=limit,
        offset=offset,
    )
    return JobPage(items=with_progress(items, progress), total=total, limit=limit, offset=offset)


@router.get("/{job_id}", response_model=JobRead, responses=error_responses(404))
async def read_job(
    job_id: JobId, session: SessionDep, usage: UsageDep, progress: ProgressDep, _: JobReader
) -> JobRead:
    """A job with its tasks (and their last CPU and memory samples), placement, status,
    reason and, while it trains, progress."""
    job = usage.annotate_job(await queries.read_job(session=session, job_id=job_id))
    return with_progress([job], progress)[0]


def with_progress(jobs: list[JobRead], board: ProgressBoard) -> list[JobRead]:
    """The jobs, each running one with where its training is (kept in memory, not stored)."""
    running = board.read_many(j.id for j in jobs if j.status is JobStatus.running)
    return [
        j.model_copy(update={"progress": running[j.id]}) if j.id in running else j for j in jobs
    ]


@dataclass(frozen=True)
class AuditedJobChange:
    """A change to one job by the caller, applied by the controller with its audit record."""

    controller: Controller
    session: AsyncSession
    principal: Principal
    source: str | None

    async def apply(
        self,
        job_id: int,
        change: Change[Any],
        action: AuditAction,
        detail: dict[str, Any] | None = None,
    ) -> JobRead:
        """The job as it reads once the change is committed."""
        await self.controller.apply(
            audit.audited(
                change,
                principal=self.principal,
                source=self.source,
                action=action,
                job_id=job_id,
                detail=detail,
            )
        )
        return await queries.read_job(session=self.session, job_id=job_id)


async def job_change(
    controller: ControllerDep, session: SessionDep, principal: ActorPrincipal, source: ClientSource
) -> AuditedJobChange:
    return AuditedJobChange(controller, session, principal, source)


JobChangeDep = Annotated[AuditedJobChange, Depends(job_change)]


@router.post("/{job_id}/cancel", response_model=JobRead, responses=error_responses(404, 409))
async def cancel_job(job_id: JobId, changes: JobChangeDep, _: JobMember) -> JobRead:
    """Cancel a job that has not finished; its tasks are stopped."""
    return await changes.apply(
        job_id, functools.partial(task_events.request_cancel, job_id=job_id), AuditAction.job_cancel
    )


@router.post("/{job_id}/restart", response_model=JobRead, responses=error_responses(404, 409))
async def restart_job(job_id: JobId, changes: JobChangeDep, _: JobMember) -> JobRead:
    """Restart the whole job: every task stops and the job is placed again."""
    return await changes.apply(
        job_id,
        functools.partial(restarts.request_job_restart, job_id=job_id),
        AuditAction.job_restart,
    )


@router.post("/{job_id}/suspend", response_model=JobRead, responses=error_responses(404, 409))
async def suspend_job(
    job_id: JobId,
    session: SessionDep,
    changes: JobChangeDep,
    links: RuntimeLinksDep,
    _: JobMember,
    deadline_seconds: Annotated[
        float,
        Query(
            gt=0,
            le=600,
            description="How long to wait for the checkpoint it resumes from; past it the "
            "job is suspended anyway, to resume from its last backup.",
        ),
    ] = interruptions.DEFAULT_DEADLINE_SECONDS,
) -> JobRead:
    """Free the job's hosts and GPUs: a checkpoint at the next step (while it trains), then
    its tasks stop. It counts against no quota until resumed. No restart is counted."""
    job = await queries.get_job(session=session, job_id=job_id)
    refusal = suspend_refusal(job.status, job.job_spec)
    if refusal is not None:
        raise Conflict(f"job {job_id} cannot be suspended: {refusal}")
    point = await interruptions.take_checkpoint(
        session=session, links=links, job_id=job_id, deadline=deadline_seconds
    )
    return await changes.apply(
        job_id,
        functools.partial(interruptions.suspend, job_id=job_id, point=point),
        AuditAction.job_suspend,
        point.data(),
    )


@router.post("/{job_id}/resume", response_model=JobRead, responses=error_responses(404, 409))
async def resume_job(job_id: JobId, changes: JobChangeDep, _: JobMember) -> JobRead:
    """Put a suspended job back in the queue, to continue from where it was suspended."""
    return await changes.apply(
        job_id, functools.partial(interruptions.resume, job_id=job_id), AuditAction.job_resume
    )


@router.get(
    "/{job_id}/events",
    response_model=list[JobEventRead],
    responses=error_responses(404),
)
async def list_job_events(
    job_id: JobId,
    session: SessionDep,
    _: JobReader,
    after: Annotated[int, Query(ge=0, le=2**63 - 1, description="Only events after this id.")] = 0,
) -> list[JobEventRead]:
    """The job's events in order: state changes, restarts, requests."""
    events = await queries.job_events(session=session, job_id=job_id, after_id=after)
    return [JobEventRead.model_validate(event) for event in events]


# Referenced by the request body above; registering it here puts it in the OpenAPI components.
__all__ = ["JobSpec", "router"]
