"""The task starts agents reported, applied: by the ReportedStarts pass, all in one
transaction, and before an agent's hello or a task's exit (backend.scheduling.agent_reports)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.db import in_pages
from backend.hosts.models import Host
from backend.scheduling import started
from backend.scheduling.cluster import ClusterView
from backend.scheduling.task_events import NamedHost
from backend.scheduling.transaction import Transaction


async def hosts_named(session: AsyncSession, names: list[str]) -> dict[str, Host]:
    if not names:
        return {}
    found = await session.scalars(select(Host).where(Host.name.in_(names)))
    return {host.name: host for host in found}


async def host_ids(session: AsyncSession, names: list[str]) -> dict[str, NamedHost]:
    """The id and name of each host named, as rows: a start needs no more of its host, and
    a pass may apply starts from every host, too many to load each as an object."""
    found: dict[str, NamedHost] = {}
    for page in in_pages(names):
        for row in await session.execute(select(Host.id, Host.name).where(Host.name.in_(page))):
            found[row.name] = row
    return found


async def apply_reported_starts(tx: Transaction, view: ClusterView, host_names: list[str]) -> None:
    """Apply the starts these agents reported since the last pass."""
    reports = {name: view.reported_starts.pop(name, []) for name in host_names}
    modes = {
        key: view.start_modes.pop(key)
        for started in reports.values()
        for key, _ in started
        if key in view.start_modes
    }
    hosts = await host_ids(tx.session, [name for name, r in reports.items() if r])
    starts = [
        (hosts[name], key, pid)
        for name, started in reports.items()
        if name in hosts
        for key, pid in started
    ]
    if starts:
        await started.mark_started_many(tx=tx, starts=starts, modes=modes)
