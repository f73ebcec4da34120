"""Hosts and the cluster view."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from backend.api.deps import AdminPrincipal, ControllerDep, ReaderPrincipal, SessionDep, UsageDep
from backend.errors import ROUTER_ERRORS, closed_query, error_responses
from backend.hosts import service
from backend.hosts.schemas import ClusterRead, HostRead

router = APIRouter(tags=["cluster"], responses=ROUTER_ERRORS, dependencies=[Depends(closed_query)])

HostName = Annotated[
    str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", description="The host's name.")
]


@router.get("/hosts", response_model=list[HostRead])
async def list_hosts(session: SessionDep, usage: UsageDep, _: ReaderPrincipal) -> list[HostRead]:
    """Every host that has joined, with its devices (and their last usage) and heartbeat age."""
    hosts = [service.host_read(host) for host in await service.list_hosts(session=session)]
    return usage.annotate_hosts(hosts)


@router.delete("/hosts/{name}", response_model=HostRead, responses=error_responses(404, 409))
async def forget_host(
    name: HostName, controller: ControllerDep, usage: UsageDep, _: AdminPrincipal
) -> HostRead:
    """Forget a host that is gone, releasing its name to an agent with another identity."""
    forgotten = await controller.forget_host(name)
    usage.forget(name)
    return forgotten


@router.get("/cluster", response_model=ClusterRead)
async def read_cluster(session: SessionDep, usage: UsageDep, _: ReaderPrincipal) -> ClusterRead:
    """Hosts, devices, and which task holds what, with their last usage samples."""
    return usage.annotate_cluster(await service.cluster_view(session=session))
