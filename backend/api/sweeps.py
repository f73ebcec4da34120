"""Sweeps: create, list, read and stop a hyperparameter search whose trials are jobs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, status

from backend.api.audit import ClientSource
from backend.api.code import get_code_store
from backend.api.deps import ActorPrincipal, CallerAccess, SessionDep, SlurmDep
from backend.audit import service as audit
from backend.audit.actions import AuditAction
from backend.errors import ROUTER_ERRORS, FieldIssue, InvalidInput, closed_query, error_responses
from backend.jobs.spec import parse_spec_document
from backend.scheduling.quotas import check_priority
from backend.slurm.admission import admit
from backend.sweeps import service
from backend.sweeps.schemas import SweepRead, SweepStop, SweepSummary
from backend.sweeps.spec import first_values, validate_sweep_spec
from backend.sweeps.states import SweepStatus
from backend.teams import service as teams_service
from backend.teams.roles import TEAM_NAME_PATTERN, ProjectRole

router = APIRouter(
    prefix="/sweeps", tags=["sweeps"], responses=ROUTER_ERRORS, dependencies=[Depends(closed_query)]
)

SweepId = Annotated[int, Path(ge=1, le=2**31 - 1)]

_SPEC_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/SweepSpec"}},
            "application/yaml": {"schema": {"$ref": "#/components/schemas/SweepSpec"}},
        },
    }
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SweepRead,
    openapi_extra=_SPEC_BODY,
    responses=error_responses(404, 413, 415),
)
async def create_sweep(
    request: Request,
    session: SessionDep,
    principal: ActorPrincipal,
    access: CallerAccess,
    source: ClientSource,
    slurm: SlurmDep,
) -> SweepRead:
    """Start a sweep (JSON or YAML) in a project you are a member of (job.project): its
    trials run as jobs of that project, `budget.parallel` at a time."""
    body = await request.body()
    spec = validate_sweep_spec(parse_spec_document(body, request.headers.get("content-type")))
    code = spec.job.get("code")
    if isinstance(code, dict) and get_code_store(request).size(str(code.get("sha256"))) is None:
        raise InvalidInput(
            [FieldIssue("job.code.sha256", f"no code bundle {code.get('sha256')}: upload it first")]
        )
    project = await teams_service.project_for_submit(
        session=session, access=access, name=spec.project
    )
    # Its trials are written by the sweep runner, not submitted: what `POST /jobs` checks of a
    # job is checked here, once, of the job with the first values written in.
    job = spec.job_for(first_values(spec))
    check_priority(project=project, priority=job.priority)
    await admit(
        job,
        settings=request.app.state.settings,
        commands=None if slurm is None else slurm.commands,
        project_account=project.slurm_account,
    )
    sweep = await service.create_sweep(
        session=session, spec=spec, project=project, submitted_by=principal.label
    )
    await audit.record(
        session=session,
        principal=principal,
        source=source,
        action=AuditAction.sweep_create,
        project_id=project.id,
        target=f"sweep {sweep.id}",
        detail={"name": sweep.name},
    )
    read = await service.read_sweep(session=session, sweep=sweep)
    await session.commit()
    request.app.state.sweeps.wake()
    return read


@router.get("", response_model=list[SweepSummary], responses=error_responses(404))
async def list_sweeps(
    session: SessionDep,
    access: CallerAccess,
    project: Annotated[
        str | None, Query(pattern=TEAM_NAME_PATTERN, description="Only this project's sweeps.")
    ] = None,
    status_: Annotated[
        list[SweepStatus], Query(alias="status", description="Only sweeps in these states.")
    ] = [],  # noqa: B006 - FastAPI copies query defaults
) -> list[SweepSummary]:
    """Sweeps of the projects you can see, newest first, with their counts and best trial."""
    found = (
        None
        if project is None
        else await teams_service.visible_project(session=session, access=access, name=project)
    )
    return await service.list_sweeps(
        session=session, access=access, project=found, statuses=status_
    )


@router.get("/{sweep_id}", response_model=SweepRead, responses=error_responses(404))
async def get_sweep(sweep_id: SweepId, session: SessionDep, access: CallerAccess) -> SweepRead:
    """The sweep, every trial with its parameters, status, objective and curve, and the best."""
    sweep = await service.visible_sweep(
        session=session, access=access, sweep_id=sweep_id, needed=ProjectRole.viewer
    )
    return await service.read_sweep(session=session, sweep=sweep)


@router.post("/{sweep_id}/stop", response_model=SweepRead, responses=error_responses(404, 409))
async def stop_sweep(
    request: Request,
    sweep_id: SweepId,
    session: SessionDep,
    principal: ActorPrincipal,
    access: CallerAccess,
    source: ClientSource,
    body: SweepStop | None = None,
) -> SweepRead:
    """Stop a running sweep: no more trials are asked for, the running ones are cancelled,
    and it ends `stopped` with the best found so far."""
    sweep = await service.visible_sweep(
        session=session, access=access, sweep_id=sweep_id, needed=ProjectRole.member
    )
    await service.request_stop(
        session=session, sweep=sweep, reason=None if body is None else body.reason
    )
    await audit.record(
        session=session,
        principal=principal,
        source=source,
        action=AuditAction.sweep_stop,
        project_id=sweep.project_id,
        target=f"sweep {sweep.id}",
    )
    read = await service.read_sweep(session=session, sweep=sweep)
    await session.commit()
    request.app.state.sweeps.wake()
    return read
