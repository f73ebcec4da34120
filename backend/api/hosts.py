"""Hosts and the cluster view."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response

from backend.api.audit import ClientSource
from backend.api.deps import (
    AdminPrincipal,
    AgentReportsDep,
    CallerAccess,
    ClusterBoardDep,
    SessionDep,
    SessionsDep,
    SignedInPrincipal,
    UsageDep,
)
from backend.audit import service as audit
from backend.audit.actions import AuditAction
from backend.cluster import service
from backend.cluster.schemas import ClusterRead
from backend.cluster.visibility import hide_other_projects
from backend.errors import ROUTER_ERRORS, closed_query, error_responses
from backend.hosts.schemas import HostRead
from backend.scheduling.transaction import Transaction

router = APIRouter(tags=["cluster"], responses=ROUTER_ERRORS, dependencies=[Depends(closed_query)])

HostName = Annotated[
    str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", description="The host's name.")
]


@router.get("/hosts", response_model=list[HostRead])
async def list_hosts(session: SessionDep, usage: UsageDep, _: SignedInPrincipal) -> list[HostRead]:
    """Every host that has joined, with its devices (and their last usage) and heartbeat age."""
    hosts = [service.host_read(host) for host in await service.list_hosts(session=session)]
    return usage.annotate_hosts(hosts)


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
