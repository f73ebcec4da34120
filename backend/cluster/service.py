"""Host operations. Keyword-only, they flush but never commit."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from agents.runtime_environment import EngineInfo
from backend.db import utcnow
from backend.errors import Conflict, NotFound
from backend.hosts import health
from backend.hosts.models import Device, Host
from backend.hosts.names import NameClash, admit_hello
from backend.hosts.schemas import DeviceRead, HostRead
from backend.hosts.states import HostStatus
from backend.jobs.cluster_changes import TaskRow, note_hosts
from backend.jobs.models import Job, Task
from backend.jobs.states import ACTIVE_JOB_STATUSES, LIVE_TASK_STATUSES


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    kind: str = "gpu"
    uuid: str | None = None
    memory_mb: int | None = None
    simulated: bool = False


async def find_host(*, session: AsyncSession, name: str) -> Host | None:
    return await session.scalar(select(Host).where(Host.name == name))


async def get_host(*, session: AsyncSession, name: str) -> Host:
    """The host with its devices (as `host_read` reads it); NotFound if there is none."""
    host = await session.scalar(
        select(Host).where(Host.name == name).options(selectinload(Host.devices))
    )
    if host is None:
        raise NotFound(f"host {name} does not exist")
    return host


async def register_host(
    *,
    session: AsyncSession,
    name: str,
    address: str,
    port_range: tuple[int, int],
    devices: Sequence[DeviceInfo],
    agent_version: str | None = None,
    identity: str | None = None,
    engine: EngineInfo | None = None,
) -> Host:
    """Create or refresh a host as its agent announces itself; it is online from now.
    Raises NameClash, changing nothing, if another identity holds the name."""
    host = await session.scalar(
        select(Host).where(Host.name == name).options(selectinload(Host.devices))
    )
    if (clash := admit_hello(name, identity, host=host)) is not None:
        raise NameClash(clash)
    now = utcnow()
    if host is None:
        host = Host(name=name, registered_at=now, info={})
        session.add(host)
    host.identity = identity
    host.address = address
    host.status = HostStatus.online
    host.port_range_start, host.port_range_end = port_range
    host.agent_version = agent_version
    host.engine = None if engine is None else engine.model_dump(mode="json")
    host.last_heartbeat_at = now
    _sync_devices(host, devices)
    await session.flush()
    return host


def _sync_devices(host: Host, announced: Sequence[DeviceInfo]) -> None:
    """Update the host's devices in place, by CUDA index, to what the agent announced."""
    existing = {device.index: device for device in host.devices}
    wanted = {info.index for info in announced}
    for device in [d for d in host.devices if d.index not in wanted]:
        host.devices.remove(device)
    for info in announced:
        device = existing.get(info.index) or Device(index=info.index)
        if device not in host.devices:
            host.devices.append(device)
        device.kind, device.name, device.uuid = info.kind, info.name, info.uuid
        device.memory_mb, device.simulated = info.memory_mb, info.simulated


async def forget_host(*, session: AsyncSession, name: str, connected_from: str | None) -> HostRead:
    """Release a host's name (a machine re-imaged or retired): its row and devices go, and
    the next agent to say hello under the name joins as a new host, whatever its identity.
    Refused while an agent is connected under the name (`connected_from`: its address) or
    while tasks of unfinished jobs are placed on it. Tasks that ran there no longer name it.
    Returns the host as it was.
    """
    host = await get_host(session=session, name=name)
    if connected_from is not None:
        raise Conflict(
            f"{name} is connected from {connected_from}: stop its agent first "
            "(forget releases the name of a host that is gone)"
        )
    jobs = (
        await session.execute(
            select(Job.id, Job.name)
            .join(Task.job)
            .where(
                Task.host_id == host.id,
                or_(Task.status.in_(LIVE_TASK_STATUSES), Job.status.in_(ACTIVE_JOB_STATUSES)),
            )
            .distinct()
            .order_by(Job.id)
        )
    ).all()
    if jobs:
        named = ", ".join(f"{job_id} ({job_name})" for job_id, job_name in jobs[:10])
        more = f" and {len(jobs) - 10} more" if len(jobs) > 10 else ""
        raise Conflict(
            f"{name} still has tasks of unfinished jobs: {named}{more}; cancel them, or wait "
            "until the host is lost and they are placed elsewhere"
        )
    note_hosts(session, [host.id])  # written below past the ORM
    await session.execute(update(Task).where(Task.host_id == host.id).values(host_id=None))
    await session.execute(delete(Device).where(Device.host_id == host.id))
    forgotten = host_read(host)
    await session.execute(delete(Host).where(Host.id == host.id))
    await session.flush()
    return forgotten


async def list_hosts(*, session: AsyncSession) -> list[Host]:
    result = await session.scalars(
        select(Host).options(selectinload(Host.devices)).order_by(Host.name)
    )
    return list(result)


async def live_tasks_by_host(*, session: AsyncSession) -> dict[int, int]:
    rows = await session.execute(
        select(Task.host_id, func.count())
        .where(Task.status.in_(LIVE_TASK_STATUSES), Task.host_id.is_not(None))
        .group_by(Task.host_id)
    )
    return {host_id: count for host_id, count in rows if host_id is not None}


async def set_draining(*, session: AsyncSession, name: str, draining: bool) -> Host:
    """Drain the host (it takes no new task) or put it back in service."""
    host = await get_host(session=session, name=name)
    if not draining:
        host.draining_since = None
    elif host.draining_since is None:
        host.draining_since = utcnow()
    await session.flush()
    return host


def host_read(host: Host, live_tasks: int = 0) -> HostRead:
    return HostRead(
        name=host.name,
        address=host.address,
        status=host.status,
        port_range=(host.port_range_start, host.port_range_end),
        agent_version=host.agent_version,
        engine=engine_read(host),
        devices=[device_read(d) for d in host.devices],
        registered_at=host.registered_at,
        last_heartbeat_at=host.last_heartbeat_at,
        heartbeat_age_seconds=_age(host),
        draining_since=host.draining_since,
        live_tasks=live_tasks,
        cordon_reason=host.cordon_reason,
        cordoned_at=host.cordoned_at,
        cordon_cause=host.cordon_cause,
        faults=health.loaded(host.faults),
        warnings=health.loaded(host.warnings),
        faults_since=host.faults_since,
    )


def engine_read(host: Host) -> EngineInfo | None:
    return None if host.engine is None else EngineInfo.model_validate(host.engine)


def device_read(device: Device) -> DeviceRead:
    return DeviceRead(
        index=device.index,
        kind=device.kind,
        name=device.name,
        uuid=device.uuid,
        memory_mb=device.memory_mb,
        simulated=device.simulated,
    )


# A device as the cluster view shows it: (index, kind, name, uuid, memory_mb, simulated).
DeviceRow = tuple[int, str, str, str | None, int | None, bool]


@dataclass(frozen=True)
class ClusterRows:
    """What the cluster view is built from, read as plain rows: loading every host and
    device as an object would cost more than the rest of the request."""

    hosts: list[Any]
    devices: dict[int, list[DeviceRow]]  # by host id, in index order
    live: dict[int, list[TaskRow]]  # by host id
    job_names: dict[int, str]  # of the jobs of those tasks


async def cluster_rows(
    *, session: AsyncSession, host_ids: Collection[int] | None = None
) -> ClusterRows:
    """Every host's rows, or only those of `host_ids` (gone hosts are left out)."""
    hosts = select(
        Host.id,
        Host.name,
        Host.address,
        Host.status,
        Host.engine,
        Host.last_heartbeat_at,
        Host.cordon_reason,
        Host.cordon_cause,
    )
    devices = select(
        Device.host_id,
        Device.index,
        Device.kind,
        Device.name,
        Device.uuid,
        Device.memory_mb,
        Device.simulated,
    ).order_by(Device.host_id, Device.index)
    # The jobs' specs and the tasks' TF_CONFIGs are not shown here.
    live = (
        select(
            Task.id,
            Task.host_id,
            Task.job_id,
            Job.name,
            Task.role,
            Task.index,
            Task.status,
            Task.port,
            Task.gpu_indices,
        )
        .join(Task.job)
        .where(Task.host_id.is_not(None), Task.status.in_(LIVE_TASK_STATUSES))
    )
    if host_ids is not None:
        hosts = hosts.where(Host.id.in_(host_ids))
        devices = devices.where(Device.host_id.in_(host_ids))
        live = live.where(Task.host_id.in_(host_ids))
    by_host: dict[int, list[DeviceRow]] = defaultdict(list)
    for owner, *device in await session.execute(devices):
        by_host[owner].append(tuple(device))  # type: ignore[arg-type]  # as selected
    tasks: dict[int, list[TaskRow]] = defaultdict(list)
    names: dict[int, str] = {}
    for row in await session.execute(live):
        task_id, host_id, job_id, job_name, role, index, status, port, gpus = row
        assert host_id is not None  # as the query asks
        names[job_id] = job_name
        tasks[host_id].append(
            TaskRow(task_id, host_id, job_id, role, index, status, port, gpus or [])
        )
    return ClusterRows(
        hosts=list(await session.execute(hosts)), devices=by_host, live=tasks, job_names=names
    )


def _age(host: Host) -> float:
    return max(0.0, (utcnow() - host.last_heartbeat_at).total_seconds())
