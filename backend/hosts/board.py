"""The cluster view (GET /cluster) kept in memory, read again only where it changed.

At a thousand hosts the view is eight thousand devices and ten thousand tasks: reading and
encoding all of it took most of a second per request. The board reads every host once, then
only the hosts that committed transactions name (backend.hosts.changes), and the heartbeat
times when they were written. Each host's part of the answer is kept encoded, apart from its
heartbeat age, and is encoded again when its rows or its last usage samples change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic_core import to_json
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agents.vocabulary import format_task_name
from backend.db import utcnow
from backend.hosts import service
from backend.hosts.models import Host
from backend.hosts.schemas import ClusterTotals
from backend.hosts.usage import TaskName, UsageBoard
from backend.jobs.states import HostStatus

# Hosts encoded again at once beyond which the work goes to a worker thread, for requests
# to go on being served beside it.
ENCODED_IN_LOOP = 50


@dataclass
class HostPart:
    """One host's rows and its part of the answer."""

    row: Any
    devices: list[Any]
    live: list[Any]
    last_heartbeat_at: datetime
    head: bytes = b""  # '{"name":...,"status":...' : the fields before the heartbeat age
    tail: bytes = b""  # ',"engine":...,"tasks":[...]}' : those after it
    samples: tuple[float | None, ...] | None = None  # the usage samples `tail` shows
    free_gpus: int = 0

    @property
    def tasks(self) -> list[TaskName]:
        return [(job_id, format_task_name(role, i)) for _, job_id, _, role, i, *_ in self.live]

    def encode(self, usage: UsageBoard, samples: tuple[float | None, ...]) -> None:
        view = usage.annotate_host_usage(
            service.host_usage(self.row, self.devices, self.live, self.last_heartbeat_at)
        )
        self.head = view.model_dump_json(include={"name", "address", "status"}).encode()[:-1]
        self.tail = b"," + view.model_dump_json(include={"engine", "devices", "tasks"}).encode()[1:]
        self.samples = samples
        self.free_gpus = service.free_gpus(view)


class ClusterBoard:
    def __init__(self) -> None:
        self._parts: dict[int, HostPart] | None = None  # by host id; None: never read
        self._order: list[HostPart] = []  # by host name
        self._changed: set[int] = set()
        self._heartbeats = False
        self._lock = asyncio.Lock()

    def changed(self, hosts: set[int], heartbeats: bool) -> None:
        """Told after a transaction ends (backend.hosts.changes)."""
        self._changed |= hosts
        self._heartbeats = self._heartbeats or heartbeats

    async def body(self, sessions: Callable[[], AsyncSession], usage: UsageBoard) -> bytes:
        """The cluster view as of now, encoded (ClusterRead)."""
        async with self._lock:  # one catches up at a time; the next sees what it missed
            async with sessions() as session:
                await self._catch_up(session)
            await self._encode(usage)
            return self._assemble()

    async def _catch_up(self, session: AsyncSession) -> None:
        # Taken before reading: what commits during the read is read again next time.
        changed, self._changed = self._changed, set()
        heartbeats, self._heartbeats = self._heartbeats, False
        if self._parts is None:
            self._parts = {}
            self._take(await service.cluster_rows(session=session), None)
        elif changed:
            self._take(await service.cluster_rows(session=session, host_ids=changed), changed)
        if heartbeats:
            for host_id, at in await session.execute(select(Host.id, Host.last_heartbeat_at)):
                if (part := self._parts.get(host_id)) is not None:
                    part.last_heartbeat_at = at

    def _take(self, rows: service.ClusterRows, asked: set[int] | None) -> None:
        assert self._parts is not None
        for gone in set(self._parts) & (asked or set()):
            del self._parts[gone]  # read again below, unless it is gone
        for row in rows.hosts:
            self._parts[row.id] = HostPart(
                row=row,
                devices=rows.devices.get(row.id, []),
                live=rows.live.get(row.id, []),
                last_heartbeat_at=row.last_heartbeat_at,
            )
        self._order = sorted(self._parts.values(), key=lambda part: part.row.name)

    async def _encode(self, usage: UsageBoard) -> None:
        stale = []
        for part in self._order:
            samples = usage.samples_of(part.row.name, part.tasks)
            if samples != part.samples:
                stale.append((part, samples))
        if len(stale) > ENCODED_IN_LOOP:
            await asyncio.to_thread(_encode_all, stale, usage)
        else:
            _encode_all(stale, usage)

    def _assemble(self) -> bytes:
        now = utcnow()
        hosts = []
        for part in self._order:
            age = max(0.0, (now - part.last_heartbeat_at).total_seconds())
            hosts.append(part.head + b',"heartbeat_age_seconds":' + to_json(age) + part.tail)
        totals = ClusterTotals(
            hosts=len(self._order),
            online_hosts=sum(p.row.status is HostStatus.online for p in self._order),
            gpus=sum(len(p.devices) for p in self._order),
            free_gpus=sum(p.free_gpus for p in self._order),
            live_tasks=sum(len(p.live) for p in self._order),
        )
        return b'{"hosts":[' + b",".join(hosts) + b'],"totals":' + to_json(totals) + b"}"


def _encode_all(stale: list[tuple[HostPart, tuple[float | None, ...]]], usage: UsageBoard) -> None:
    for part, samples in stale:
        part.encode(usage, samples)
