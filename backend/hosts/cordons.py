"""Cordoning a host (it takes no new task; what runs there goes on) and clearing it.
Keyword-only; flush, never commit: the caller's transaction writes the change with its
audit entry."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from backend.db import utcnow
from backend.errors import NotFound
from backend.hosts.health import CordonCause
from backend.hosts.models import Host


async def host_named(*, session: AsyncSession, name: str) -> Host:
    host = await session.scalar(
        select(Host).where(Host.name == name).options(selectinload(Host.devices))
    )
    if host is None:
        raise NotFound(f"host {name} does not exist")
    return host


def cordon(host: Host, *, reason: str, cause: CordonCause) -> bool:
    """Cordon the host, unless it is already (an automatic cordon keeps the first reason; an
    operator's replaces it). Returns whether this changed it."""
    if host.cordoned_at is not None and cause is not CordonCause.manual:
        return False
    host.cordon_reason, host.cordon_cause = reason[:512], cause.value
    if host.cordoned_at is None:
        host.cordoned_at = utcnow()
    return True


def uncordon(host: Host) -> None:
    """Put it back in service. The faults reported now are acknowledged: they cordon it
    again only once they change (backend.hosts.health.new_faults)."""
    host.cordon_reason = host.cordoned_at = host.cordon_cause = None
    host.acknowledged_faults = list(host.faults or [])
