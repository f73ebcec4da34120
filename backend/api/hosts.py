"""Hosts and the cluster view."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response

from backend.api.audit import ClientSource
from backend.api.deps import (
    AdminPrincipal,
    AgentReportsDep,
    CallerAccess,
    ClusterBoardDep,
    ControllerDep,
    SessionDep,
    SessionsDep,
    SignedInPrincipal,
    UsageDep,
)
from backend.audit import service as audit
from backend.audit.actions import AuditAction
from backend.auth import Principal
from backend.cluster import service
from backend.cluster.schemas import ClusterRead
from backend.cluster.visibility import hide_other_projects
from backend.errors import ROUTER_ERRORS, closed_query, error_responses
from backend.hosts.schemas import HostRead
from backend.scheduling.reconcilers.drains import drain_reason
from backend.scheduling.task_events import TaskAttempt, jobs_on
from backend.scheduling.transaction import Transaction

router = APIRouter(tags=["cluster"], responses=ROUTER_ERRORS, dependencies=[Depends(closed_query)])

HostName = Annotated[
    str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", description="The host's name.")
]


@router.get("/hosts", response_model=list[HostRead])
async def list_hosts(session: SessionDep, usage: UsageDep, _: SignedInPrincipal) -> list[HostRead]:
    """Every host that has joined, with its devices (and their last usage), heartbeat age,
    whether it is drained, and how many tasks it holds."""
    live = await service.live_tasks_by_host(session=session)
    hosts = [
        service.host_read(host, live.get(host.id, 0))
        for host in await service.list_hosts(session=session)
    ]
    return usage.annotate_hosts(hosts)


async def set_draining(
    tx: Transaction, name: str, draining: bool, principal: Principal, source: str | None
) -> HostRead:
    """Drain or undrain the host, audited; the host as it reads afterwards."""
    host = await service.set_draining(session=tx.session, name=name, draining=draining)
    await audit.record(
        session=tx.session,
        principal=principal,
        source=source,
        action=AuditAction.host_drain if draining else AuditAction.host_undrain,
        target=f"host {name}",
    )
    live = await service.live_tasks_by_host(session=tx.session)
    return service.host_read(host, live.get(host.id, 0))


@router.post("/hosts/{name}/drain", response_model=HostRead, responses=error_responses(404))
async def drain_host(
    name: HostName,
    controller: ControllerDep,
    principal: AdminPrincipal,
    source: ClientSource,
    deadline_seconds: Annotated[
        float,
        Query(
            gt=0,
            le=86400,
            description="How long the jobs there may take to checkpoint before they are "
            "moved anyway (each waits at most STRATA_INTERRUPTION_DEADLINE_SECONDS).",
        ),
    ] = 600.0,
) -> HostRead:
    """Take a host out of service: it takes no new task, and every job running there is
    moved off by the interruption path (a checkpoint, then its tasks there, and those
    TensorFlow needs restarted with them, are placed elsewhere; no restart is counted). The
    drain is complete when its `live_tasks` is 0."""

    async def change(tx: Transaction) -> tuple[HostRead, dict[int, frozenset[TaskAttempt]]]:
        host = await set_draining(tx, name, True, principal, source)
        return host, await jobs_on(tx.session, name)

    host, jobs = await controller.apply(change)
    deadline = min(deadline_seconds, controller.settings.interruption_deadline_seconds)
    for job_id, attempts in jobs.items():
        controller.interrupter.vacate(
            job_id, name, attempts, deadline, why=drain_reason(name), cause="drain"
        )
    return host


@router.post("/hosts/{name}/notice", response_model=HostRead, responses=error_responses(404))
async def host_notice(
    name: HostName,
    reports: AgentReportsDep,
    session: SessionDep,
    principal: AdminPrincipal,
    source: ClientSource,
    seconds: Annotated[
        float,
        Query(gt=0, le=3600, description="How long until the host goes (its notice)."),
    ],
    reason: Annotated[
        str, Query(max_length=200, description="What gave notice, for the job's events.")
    ] = "a notice came for it",
) -> HostRead:
    """The host will go in `seconds` (a spot instance's or a preemption's notice, which a
    site's watcher forwards): as when its agent is told to stop, it takes no new task and
    every job with tasks there is checkpointed and moved off, before the notice is up."""
    await service.get_host(session=session, name=name)  # 404 before anything changes
    await session.rollback()  # the check's read ends here; the change is the controller's

    async def record(tx: Transaction) -> None:
        await audit.record(
            session=tx.session,
            principal=principal,
            source=source,
            action=AuditAction.host_notice,
            target=f"host {name}",
            detail={"seconds": seconds, "reason": reason},
        )

    await reports.on_leaving(name, seconds, why=reason, record=record)
    live = await service.live_tasks_by_host(session=session)
    host = await service.get_host(session=session, name=name)
    return service.host_read(host, live.get(host.id, 0))


@router.delete("/hosts/{name}/drain", response_model=HostRead, responses=error_responses(404))
async def undrain_host(
    name: HostName, controller: ControllerDep, principal: AdminPrincipal, source: ClientSource
) -> HostRead:
    """Put a drained host back in service: it takes tasks again."""

    async def change(tx: Transaction) -> HostRead:
        return await set_draining(tx, name, False, principal, source)

    return await controller.apply(change)


@router.delete("/hosts/{name}", response_model=HostRead, responses=error_responses(404, 409))
async def forget_host(
    name: HostName,
    reports: AgentReportsDep,
    usage: UsageDep,
    principal: AdminPrincipal,
    source: ClientSource,
) -> HostRead:
    """Forget a host that is gone, releasing its name to an agent with another identity."""

    async def recorded(tx: Transaction) -> None:
        await audit.record(
            session=tx.session,
            principal=principal,
            source=source,
            action=AuditAction.host_forget,
            target=f"host {name}",
        )

    forgotten = await reports.forget_host(name, also=recorded)
    usage.forget(name)
    return forgotten


@router.get("/cluster", response_model=ClusterRead)
async def read_cluster(
    board: ClusterBoardDep, sessions: SessionsDep, usage: UsageDep, access: CallerAccess
) -> Response:
    """Hosts, devices, and which task holds what, with their last usage samples."""
    body = await board.body(sessions, usage)
    if access.project_ids is not None:  # a user: other projects' jobs are not shown
        async with sessions() as session:
            mine = await hide_other_projects(
                ClusterRead.model_validate_json(body),
                session=session,
                project_ids=access.project_ids,
            )
        body = mine.model_dump_json().encode()
    return Response(body, media_type="application/json")
