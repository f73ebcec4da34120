"""Hosts and the cluster view."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from backend.api.deps import ReaderPrincipal, SessionDep
from backend.errors import ROUTER_ERRORS, closed_query
from backend.hosts import service
from backend.hosts.schemas import ClusterRead, HostRead

router = APIRouter(tags=["cluster"], responses=ROUTER_ERRORS, dependencies=[Depends(closed_query)])


@router.get("/hosts", response_model=list[HostRead])
async def list_hosts(session: SessionDep, _: ReaderPrincipal) -> list[HostRead]:
    """Every host that has joined, with its devices and heartbeat age."""
    return [service.host_read(host) for host in await service.list_hosts(session=session)]


@router.get("/cluster", response_model=ClusterRead)
async def read_cluster(session: SessionDep, _: ReaderPrincipal) -> ClusterRead:
    """Hosts, devices, and which task holds what."""
    return await service.cluster_view(session=session)
