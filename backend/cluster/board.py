"""The cluster view (GET /cluster) kept in memory and brought up to date from what changed.

The view holds every host, device and live task: reading and encoding all of it per request
is too slow for a large cluster. The board reads every host once; after
that, each committed transaction tells it what it wrote (backend.jobs.cluster_changes): tasks are
applied in memory as written, and only hosts whose own row or devices changed are read again,
with the heartbeat times when they were written. Each host's part of the answer is kept
encoded, apart from its heartbeat age, until its tasks, rows or last usage samples change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic_core import to_json
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agents.runtime_environment import EngineInfo
from agents.vocabulary import format_task_name
from backend.cluster import service
from backend.cluster.schemas import ClusterTotals
from backend.cluster.service import DeviceRow
from backend.cluster.usage import UsageBoard
from backend.db import utcnow
from backend.hosts.models import Host
from backend.hosts.states import HostStatus
from backend.jobs.cluster_changes import ClusterChanges, TaskRow
from backend.jobs.states import LIVE_TASK_STATUSES

log = logging.getLogger(__name__)

# Hosts encoded again at once beyond which the work goes to a worker thread, for requests
# to go on being served beside it.
ENCODED_IN_LOOP = 200
# Rows written (tasks and hosts) since the last keep-up past which it waits for a quieter
# interval: while many jobs start, every host changes often, and encoding each again every
# interval spends the server's CPU for nobody in between.
BURST_ROWS = 500
# Job names kept for tasks written later; past this many only those of the tasks shown are
# kept (a task of a job the board does not know has its host read again).
JOB_NAMES_KEPT = 100_000


@dataclass
class HostPart:
    """One host's rows, its live tasks by id, and its part of the answer (ClusterRead's
    HostUsage, encoded without its heartbeat age)."""

    row: Any
    devices: list[DeviceRow]
    live: dict[int, TaskRow]
    last_heartbeat_at: datetime
    head: bytes = b""  # '{"name":...,"status":...' : the fields before the heartbeat age
    tail: bytes = b""  # ',"engine":...,"tasks":[...]}' : those after it
    samples: tuple[float | None, ...] | None = None  # the usage samples `tail` shows
    free_gpus: int = 0
    names: list[tuple[int, str]] = field(default_factory=list)  # (job id, task) as encoded

    def changed(self) -> None:
        self.samples = None  # encoded again on the next read

    def encode(
        self, usage: UsageBoard, job_names: dict[int, str], samples: tuple[float | None, ...] | None
    ) -> None:
        """Plain values encoded in one go, not models: building a model per row would cost
        more than all the rest of a request."""
        host = self.row
        online = host.status is HostStatus.online
        refs, names = [], []
        holder: dict[int, dict[str, Any]] = {}
        for task in sorted(self.live.values(), key=lambda t: (t.job_id, t.role, t.index)):
            name = format_task_name(task.role, task.index)
            names.append((task.job_id, name))
            ref = {
                "job_id": task.job_id,
                "job_name": job_names[task.job_id],
                "task": name,
                "status": task.status,
                "port": task.port,
                "gpus": task.gpus,
                "stats": usage.task(task.job_id, name),
            }
            refs.append(ref)
            for gpu in task.gpus:
                holder[gpu] = ref
        devices = [
            {
                "index": index,
                "kind": kind,
                "name": name,
                "uuid": uuid,
                "memory_mb": memory_mb,
                "simulated": simulated,
                "stats": usage.device(host.name, index) if online else None,
                "task": holder.get(index),
            }
            for index, kind, name, uuid, memory_mb, simulated in self.devices
        ]
        engine = None if host.engine is None else EngineInfo.model_validate(host.engine)
        head = {"name": host.name, "address": host.address, "status": host.status}
        self.head = to_json(head)[:-1]
        self.tail = (
            b","
            + to_json(
                {
                    "engine": engine,
                    "devices": devices,
                    "tasks": refs,
                    "cordon_reason": host.cordon_reason,
                    "cordon_cause": host.cordon_cause,
                }
            )[1:]
        )
        self.names = names
        self.samples = usage.samples_of(host.name, self.names) if samples is None else samples
        self.free_gpus = sum(1 for d in devices if d["task"] is None) if online else 0


class ClusterBoard:
    def __init__(self) -> None:
        self._parts: dict[int, HostPart] | None = None  # by host id; None: never read
        self._order: list[HostPart] = []  # by host name
        self._where: dict[int, int] = {}  # task id → the host it is shown on
        self._job_names: dict[int, str] = {}
        self._pending = ClusterChanges()
        self._lock = asyncio.Lock()
        self._rows_written = 0  # since the last keep_up call or catch-up

    def changed(self, changes: ClusterChanges) -> None:
        """Told after a transaction commits (backend.jobs.cluster_changes)."""
        if self._parts is None:
            return  # never read yet: the first read reads everything (and nothing piles up)
        self._pending.merge(changes)
        self._rows_written += len(changes.tasks) + len(changes.hosts)

    async def body(self, sessions: Callable[[], AsyncSession], usage: UsageBoard) -> bytes:
        """The cluster view as of now, encoded (ClusterRead)."""
        async with self._lock:  # one catches up at a time; the next sees what it missed
            async with sessions() as session:
                await self._catch_up(session)
            await self._encode(usage)
            return self._assemble()

    async def run(
        self, sessions: Callable[[], AsyncSession], usage: UsageBoard, interval: float = 1.0
    ) -> None:
        """Keeps up every `interval` seconds until cancelled, so that a request finds little
        left to do: after a burst of placements, the next request would otherwise encode
        every changed host itself."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.keep_up(sessions, usage)
            except Exception:
                log.exception("keeping the cluster view up to date failed")

    async def keep_up(self, sessions: Callable[[], AsyncSession], usage: UsageBoard) -> None:
        """Apply what was written since, and encode the hosts it changed. Nothing before the
        view is first asked for, nor while more than BURST_ROWS rows were written since the
        last call; heartbeat ages and usage samples wait for a request."""
        pending = self._pending
        if self._parts is None or not (pending.tasks or pending.hosts or pending.reread_tasks):
            return
        written, self._rows_written = self._rows_written, 0
        if written > BURST_ROWS:
            return  # a burst goes on: caught up after it (or by a request meanwhile)
        async with self._lock:
            async with sessions() as session:
                await self._catch_up(session, ages=False)
            await self._encode(usage, samples=False)

    async def _catch_up(self, session: AsyncSession, *, ages: bool = True) -> None:
        # Taken before reading: what commits while this reads is applied next time.
        pending, self._pending = self._pending, ClusterChanges()
        self._rows_written = 0
        if not ages:  # left for the next request
            self._pending.heartbeats, pending.heartbeats = pending.heartbeats, False
        if self._parts is None:
            self._parts = {}
            self._take(await service.cluster_rows(session=session), set())
            return
        self._job_names.update(pending.job_names)
        # Tasks first, then the hosts read again: what is read is at least as new.
        read_again = pending.hosts | self._apply(pending.tasks.values())
        read_again |= {h for t in pending.reread_tasks if (h := self._where.get(t)) is not None}
        if read_again:
            self._take(await service.cluster_rows(session=session, host_ids=read_again), read_again)
        if pending.heartbeats:
            for host_id, at in await session.execute(select(Host.id, Host.last_heartbeat_at)):
                if (part := self._parts.get(host_id)) is not None:
                    part.last_heartbeat_at = at

    def _apply(self, tasks: Iterable[TaskRow]) -> set[int]:
        """Move each task to where it was written; returns the hosts to read instead (one the
        board does not know yet, or a task of a job whose name it does not know)."""
        assert self._parts is not None
        unknown: set[int] = set()
        for task in tasks:
            was_on = self._where.get(task.task_id)
            part = None if was_on is None else self._parts.get(was_on)
            if part is not None:
                if part.live.get(task.task_id) == task:
                    continue  # written as it was (a flush writes some rows with nothing changed)
                part.live.pop(task.task_id, None)
                self._where.pop(task.task_id, None)
                part.changed()
            if task.host_id is None or task.status not in LIVE_TASK_STATUSES:
                continue
            part = self._parts.get(task.host_id)
            if part is None or task.job_id not in self._job_names:
                unknown.add(task.host_id)
                continue
            part.live[task.task_id] = task
            part.changed()
            self._where[task.task_id] = task.host_id
        return unknown

    def _take(self, rows: service.ClusterRows, asked: set[int]) -> None:
        """Replace the parts of the hosts read (all of them when `asked` is empty)."""
        assert self._parts is not None
        for host_id in asked:
            if (gone := self._parts.pop(host_id, None)) is not None:
                for task_id in gone.live:
                    self._where.pop(task_id, None)
        if len(self._job_names) > JOB_NAMES_KEPT:  # only those of the tasks shown are kept
            shown = {task.job_id for part in self._parts.values() for task in part.live.values()}
            self._job_names = {job: self._job_names[job] for job in shown}
        for row in rows.hosts:
            live = rows.live.get(row.id, [])
            self._parts[row.id] = HostPart(
                row=row,
                devices=rows.devices.get(row.id, []),
                live={task.task_id: task for task in live},
                last_heartbeat_at=row.last_heartbeat_at,
            )
            for task in live:
                shown_on = self._where.get(task.task_id)
                if shown_on not in (None, row.id) and (other := self._parts.get(shown_on)):
                    other.live.pop(task.task_id, None)  # moved by a change rolled back since
                    other.changed()
                self._where[task.task_id] = row.id
        self._job_names.update(rows.job_names)
        self._order = sorted(self._parts.values(), key=lambda part: part.row.name)

    async def _encode(self, usage: UsageBoard, *, samples: bool = True) -> None:
        """Encode the hosts that changed, and those with newer usage samples (`samples`)."""
        stale: list[tuple[HostPart, tuple[float | None, ...] | None]] = []
        for part in self._order:
            if part.samples is None:  # its tasks changed: named afresh as it is encoded
                stale.append((part, None))
            elif not samples:
                continue
            elif (sampled := usage.samples_of(part.row.name, part.names)) != part.samples:
                stale.append((part, sampled))
        if len(stale) > ENCODED_IN_LOOP:
            await asyncio.to_thread(_encode_all, stale, usage, self._job_names)
        else:
            _encode_all(stale, usage, self._job_names)

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


def _encode_all(
    stale: list[tuple[HostPart, tuple[float | None, ...] | None]],
    usage: UsageBoard,
    job_names: dict[int, str],
) -> None:
    for part, samples in stale:
        part.encode(usage, job_names, samples)
