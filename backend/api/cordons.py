"""Cordoning a host by hand, and clearing a cordon (a fault's or the operator's own)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from fastapi import APIRouter, Body, Depends

from backend.api.audit import ClientSource
from backend.api.deps import AdminPrincipal, ControllerDep
from backend.api.hosts import HostName
from backend.audit import service as audit
from backend.audit.actions import AuditAction
from backend.auth import Principal
from backend.cluster import service
from backend.errors import ROUTER_ERRORS, closed_query, error_responses
from backend.hosts import cordons
from backend.hosts.health import CordonCause
from backend.hosts.models import Host
from backend.hosts.schemas import HostRead
from backend.scheduling.controller import Change, Controller
from backend.scheduling.transaction import Transaction

router = APIRouter(tags=["cluster"], responses=ROUTER_ERRORS, dependencies=[Depends(closed_query)])

Reason = Annotated[
    str,
    Body(
        embed=True,
        min_length=1,
        max_length=512,
        description="Why, in a few words: shown with the host until it is cleared.",
    ),
]


@router.post("/hosts/{name}/cordon", response_model=HostRead, responses=error_responses(404))
async def cordon_host(
    name: HostName,
    reason: Reason,
    controller: ControllerDep,
    principal: AdminPrincipal,
    source: ClientSource,
) -> HostRead:
    """Cordon a host: it takes no new task, and what runs there goes on (unlike a drain).
    Hosts are also cordoned by themselves, for a fault their agent reports or for repeated
    infrastructure failures of their tasks."""

    async def change(tx: Transaction) -> HostRead:
        host = await cordons.host_named(session=tx.session, name=name)
        cordons.cordon(host, reason=reason, cause=CordonCause.manual)
        detail = {"reason": reason}
        return await audited(tx, principal, source, AuditAction.host_cordon, host, detail)

    return await apply(controller, change)


@router.post("/hosts/{name}/uncordon", response_model=HostRead, responses=error_responses(404))
async def uncordon_host(
    name: HostName, controller: ControllerDep, principal: AdminPrincipal, source: ClientSource
) -> HostRead:
    """Clear a host's cordon: it takes tasks again. The faults its agent reports now are
    acknowledged: they cordon it again only if they change (another fault, a count that
    grew) or once they have cleared and come back."""

    async def change(tx: Transaction) -> HostRead:
        host = await cordons.host_named(session=tx.session, name=name)
        detail = {"reason": host.cordon_reason, "cause": host.cordon_cause}
        cordons.uncordon(host)
        return await audited(
            tx,
            principal,
            source,
            AuditAction.host_uncordon,
            host,
            {"cleared": detail, "acknowledged": host.acknowledged_faults},
        )

    return await apply(controller, change)


async def audited(
    tx: Transaction,
    principal: Principal,
    source: str | None,
    action: AuditAction,
    host: Host,
    detail: Mapping[str, object],
) -> HostRead:
    """The change's audit entry, then the host as it reads now."""
    await audit.record(
        session=tx.session,
        principal=principal,
        source=source,
        action=action,
        target=f"host {host.name}",
        detail=dict(detail),
    )
    await tx.session.flush()
    live = await service.live_tasks_by_host(session=tx.session)
    return service.host_read(host, live.get(host.id, 0))


async def apply(controller: Controller, change: Change[HostRead]) -> HostRead:
    read = await controller.apply(change)
    controller.view.unplaced = None  # the jobs that found no room look at it now
    return read
