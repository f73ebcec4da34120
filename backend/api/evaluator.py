"""The sidecar evaluator of a job: start and stop it."""

from __future__ import annotations

import functools
from typing import Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict

from backend.api.audit import ClientSource
from backend.api.deps import ActorPrincipal, ControllerDep, JobId, JobMember, SessionDep
from backend.audit import service as audit
from backend.audit.actions import AuditAction
from backend.errors import ROUTER_ERRORS, closed_query, error_responses
from backend.jobs import queries
from backend.jobs.schemas import JobRead
from backend.scheduling.evaluator import request_evaluator

router = APIRouter(
    prefix="/jobs/{job_id}",
    tags=["evaluator"],
    responses=ROUTER_ERRORS,
    dependencies=[Depends(closed_query)],
)


class EvaluatorRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["start", "stop"]


@router.post("/evaluator", response_model=JobRead, responses=error_responses(404, 409))
async def evaluator(
    job_id: JobId,
    body: EvaluatorRequest,
    session: SessionDep,
    controller: ControllerDep,
    principal: ActorPrincipal,
    _: JobMember,
    source: ClientSource,
) -> JobRead:
    """Start the job's sidecar evaluator on a host with room, or stop it. It evaluates each
    new checkpoint and reports `eval/<metric>` at the checkpoint's step."""
    await controller.apply(
        audit.audited(
            functools.partial(request_evaluator, job_id=job_id, action=body.action),
            principal=principal,
            source=source,
            action=AuditAction.job_evaluator,
            job_id=job_id,
            detail={"action": body.action},
        )
    )
    return await queries.read_job(session=session, job_id=job_id)
