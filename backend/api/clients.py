"""The client coordinator of a job whose coordinator is the client (runtime.connect): it
attaches, says it is alive, and detaches. Each change goes through the controller, so that
a pass finding the client gone and the client's own requests are applied one at a time."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response, status
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agents.environment import TaskEnvironment
from agents.protocol import TaskKey
from agents.vocabulary import Role
from backend.api.deps import ActorPrincipal, ControllerDep, JobId, JobMember, SettingsDep
from backend.auth import TokenRegistry
from backend.clients import service
from backend.clients.schemas import Attachment, AttachRequest
from backend.config import Settings
from backend.errors import ROUTER_ERRORS, Conflict, closed_query, error_responses
from backend.jobs.models import Job, Task
from backend.jobs.schemas import ClientRead
from backend.scheduling.launch import JobLaunch
from backend.scheduling.transaction import Transaction

router = APIRouter(
    prefix="/jobs/{job_id}/client",
    tags=["jobs"],
    responses=ROUTER_ERRORS,
    dependencies=[Depends(closed_query)],
)


async def served_cluster(session: AsyncSession, job: Job) -> dict[str, list[str]]:
    """The workers' and ps' addresses, as their TF_CONFIG names them."""
    tasks = await session.scalars(
        select(Task).where(Task.job_id == job.id, Task.role.in_([Role.worker, Role.ps]))
    )
    config = next((task.tf_config for task in tasks if task.tf_config), None)
    if config is None:
        raise Conflict(f"job {job.id}'s workers and ps have no addresses yet")
    return {role: list(config["cluster"][role]) for role in (Role.worker, Role.ps)}


def client_env(
    job: Job,
    session_number: int,
    cluster: dict[str, list[str]],
    registry: TokenRegistry,
    settings: Settings,
) -> dict[str, str]:
    """What the runtime reads in a chief, for the client: its token, checkpoint dir and
    policy, export and strategy options, STRATA_TASK and TF_CONFIG (no device list: the
    client's own devices are its business)."""
    launch = JobLaunch.of(
        spec=job.job_spec,
        job_id=job.id,
        task_token=registry.task_token(job.id),
        checkpoint_root=settings.checkpoints,
    )
    tf_config = {"cluster": cluster, "task": {"type": Role.chief.value, "index": 0}}
    key = TaskKey(job_id=job.id, task=service.CLIENT_TASK, attempt=session_number)
    env = launch.environment(key=key, gpus=[], tf_config=tf_config)
    own = launch.env.keys() - job.job_spec.env.keys()
    keep = {*own, "TF_CONFIG", "STRATA_TASK", "STRATA_ATTEMPT"}
    client = TaskEnvironment(client_session=session_number).to_env()
    return {name: value for name, value in env.items() if name in keep} | client


@router.post("", response_model=Attachment, responses=error_responses(404, 409))
async def attach(
    job_id: JobId,
    body: AttachRequest,
    request: Request,
    controller: ControllerDep,
    settings: SettingsDep,
    principal: ActorPrincipal,
    _: JobMember,
) -> Attachment:
    """Attach the caller as the job's coordinator (409 while another client is attached,
    unless take_over; and until the job's workers and ps serve)."""

    async def change(tx: Transaction) -> Attachment:
        client = await service.attach(
            session=tx.session,
            job_id=job_id,
            host=body.host,
            pid=body.pid,
            actor=principal.label,
            take_over=body.take_over,
        )
        job = await tx.session.get_one(Job, job_id)
        cluster = await served_cluster(tx.session, job)
        registry: TokenRegistry = request.app.state.tokens
        return Attachment(
            client=ClientRead.of(client),
            task=service.CLIENT_TASK,
            cluster=cluster,
            env=client_env(job, client.session, cluster, registry, settings),
            heartbeat_seconds=settings.client_heartbeat_seconds,
            lost_seconds=settings.client_lost_seconds,
        )

    return await controller.apply(change, frees_or_takes_capacity=False)


@router.post("/{session}/heartbeat", response_model=ClientRead, responses=error_responses(404, 409))
async def heartbeat(
    job_id: JobId, session: int, controller: ControllerDep, _: JobMember
) -> ClientRead:
    """The attached client is alive (409 once it was taken over or found gone)."""

    async def change(tx: Transaction) -> ClientRead:
        client = await service.heartbeat(session=tx.session, job_id=job_id, number=session)
        return ClientRead.of(client)

    return await controller.apply(change, frees_or_takes_capacity=False)


@router.delete(
    "/{session}", status_code=status.HTTP_204_NO_CONTENT, responses=error_responses(404, 409)
)
async def detach(job_id: JobId, session: int, controller: ControllerDep, _: JobMember) -> Response:
    """The client is done coordinating; the workers and ps keep serving."""
    await controller.apply(
        lambda tx: service.detach_session(session=tx.session, job_id=job_id, number=session),
        frees_or_takes_capacity=False,
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)
