"""The latest usage sample of every host's GPUs and every task attempt, as agents report them in
their heartbeats (agents.host.usage), kept in memory: a sample is a few seconds old at most,
and after a server restart the next heartbeats bring it back.

Reads (GET /hosts, /cluster, /jobs/{id}) take the stats from here. A job's live stream gets a
`usage` frame per task and sample, carrying `task/*` series and the `host/*` series of the
GPUs that task holds, only while someone subscribes to the job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agents.protocol import DeviceStats, TaskStats, UsageReport
from agents.vocabulary import format_task_name
from backend.hosts.schemas import DeviceStatsRead, HostRead, TaskStatsRead
from backend.hosts.states import HostStatus
from backend.jobs.models import Task
from backend.jobs.schemas import JobRead
from backend.streams.broker import Broker, job_topic
from backend.streams.frames import UsageFrame

TaskName = tuple[int, str]  # (job id, "worker:1")
GPU_MEMO = 10_000  # attempts whose GPUs are remembered for the streams; beyond, it starts over


@dataclass(frozen=True)
class TaskSample:
    host: str
    wall_time: float
    stats: TaskStats


class UsageBoard:
    def __init__(self, broker: Broker, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._broker = broker
        self._sessions = sessions
        self._devices: dict[str, tuple[float, dict[int, DeviceStats]]] = {}
        self._tasks: dict[TaskName, TaskSample] = {}
        self._host_tasks: dict[str, set[TaskName]] = {}  # what each host's last sample named
        self._gpus: dict[tuple[int, str, int], list[int]] = {}  # attempt → GPUs, for streams

    async def record(self, host: str, report: UsageReport) -> None:
        """Keep a host's sample (its tasks' last samples replaced), and stream it to the jobs
        that have subscribers."""
        self._devices[host] = (report.wall_time, {d.index: d for d in report.devices})
        named = {(s.key.job_id, s.key.task) for s in report.tasks}
        for gone in self._host_tasks.get(host, set()) - named:
            if (sample := self._tasks.get(gone)) is not None and sample.host == host:
                del self._tasks[gone]
        self._host_tasks[host] = named
        for stats in report.tasks:
            self._tasks[(stats.key.job_id, stats.key.task)] = TaskSample(
                host, report.wall_time, stats
            )
        watched = {
            s.key.job_id for s in report.tasks if self._broker.subscribers(job_topic(s.key.job_id))
        }
        if watched:
            await self._stream(host, report, watched)

    def forget(self, host: str) -> None:
        """The host is gone (`strata hosts forget`)."""
        self._devices.pop(host, None)
        for name in self._host_tasks.pop(host, set()):
            if (sample := self._tasks.get(name)) is not None and sample.host == host:
                del self._tasks[name]

    # --- reads ------------------------------------------------------------------------

    def device(self, host: str, index: int) -> DeviceStatsRead | None:
        sampled = self._devices.get(host)
        stats = sampled[1].get(index) if sampled is not None else None
        if sampled is None or stats is None:
            return None
        return DeviceStatsRead(
            utilization_percent=stats.utilization_percent,
            memory_used_bytes=stats.memory_used_bytes,
            memory_total_bytes=stats.memory_total_bytes,
            sampled_at=_at(sampled[0]),
        )

    def task(self, job_id: int, task: str, attempt: int | None = None) -> TaskStatsRead | None:
        """The last sample of a task, if it is of `attempt` (any attempt when None)."""
        sample = self._tasks.get((job_id, task))
        if sample is None or (attempt is not None and sample.stats.key.attempt != attempt):
            return None
        stats = sample.stats
        return TaskStatsRead(
            attempt=stats.key.attempt,
            cpu_percent=stats.cpu_percent,
            cpu_seconds=stats.cpu_seconds,
            rss_bytes=stats.rss_bytes,
            sampled_at=_at(sample.wall_time),
        )

    def cpu_percent(self, job_id: int, task: str, attempt: int) -> float | None:
        """The attempt's CPU use in its last sample, if it has one."""
        sample = self._tasks.get((job_id, task))
        if sample is None or sample.stats.key.attempt != attempt:
            return None
        return sample.stats.cpu_percent

    def annotate_hosts(self, hosts: list[HostRead]) -> list[HostRead]:
        """Device stats of online hosts (a lost host's last sample says nothing about now)."""
        for host in hosts:
            online = host.status is HostStatus.online
            for device in host.devices:
                device.stats = self.device(host.name, device.index) if online else None
        return hosts

    def samples_of(self, host: str, tasks: Iterable[TaskName]) -> tuple[float | None, ...]:
        """When the samples of this host's devices and of these tasks were taken: while they
        stay the same, so do the stats the cluster view shows for them."""
        sampled = self._devices.get(host)
        tasks_sampled = (self._tasks.get(name) for name in tasks)
        return (
            None if sampled is None else sampled[0],
            *(None if sample is None else sample.wall_time for sample in tasks_sampled),
        )

    def annotate_job(self, job: JobRead) -> JobRead:
        for task in job.tasks:
            task.stats = self.task(job.id, task.name, task.attempt)
        return job

    # --- the job streams --------------------------------------------------------------

    async def _stream(self, host: str, report: UsageReport, jobs: set[int]) -> None:
        devices = {d.index: d for d in report.devices}
        chosen = [s for s in report.tasks if s.key.job_id in jobs]
        if devices:
            await self._learn_gpus([s for s in chosen if _attempt(s) not in self._gpus])
        for stats in chosen:
            values: dict[str, float | None] = {
                "task/cpu_percent": stats.cpu_percent,
                "task/cpu_seconds": stats.cpu_seconds,
                "task/rss_bytes": _float(stats.rss_bytes),
            }
            for index in self._gpus.get(_attempt(stats), []):
                device = devices.get(index)
                if device is not None:
                    values.update(_device_series(index, device))
            frame = UsageFrame(
                type="usage",
                task=stats.key.task,
                attempt=stats.key.attempt,
                host=host,
                wall_time=report.wall_time,
                values=values,
            )
            self._broker.publish(job_topic(stats.key.job_id), frame)

    async def _learn_gpus(self, unknown: list[TaskStats]) -> None:
        """The GPUs these attempts hold, from the database (once per attempt)."""
        if not unknown:
            return
        if len(self._gpus) > GPU_MEMO:
            self._gpus.clear()
        async with self._sessions() as session:
            rows = await session.execute(
                select(Task.job_id, Task.role, Task.index, Task.attempt, Task.gpu_indices).where(
                    Task.job_id.in_({s.key.job_id for s in unknown})
                )
            )
            for job_id, role, index, attempt, gpus in rows:
                self._gpus[(job_id, format_task_name(role, index), attempt)] = list(gpus or [])
        for stats in unknown:  # attempts the database no longer has hold nothing
            self._gpus.setdefault(_attempt(stats), [])


def _device_series(index: int, device: DeviceStats) -> dict[str, float | None]:
    prefix = f"host/gpu{index}"
    return {
        f"{prefix}/utilization_percent": device.utilization_percent,
        f"{prefix}/memory_used_bytes": _float(device.memory_used_bytes),
        f"{prefix}/memory_total_bytes": _float(device.memory_total_bytes),
    }


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


def _attempt(stats: TaskStats) -> tuple[int, str, int]:
    return (stats.key.job_id, stats.key.task, stats.key.attempt)


def _at(wall_time: float) -> datetime:
    return datetime.fromtimestamp(wall_time, UTC)
