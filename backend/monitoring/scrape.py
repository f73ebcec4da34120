"""A scrape of `/metrics`: the database's counts read with a few aggregate queries, then every
instrument of the server in Prometheus's text format.

Reading counts when scraped, rather than keeping gauges current at every change, keeps them
right whoever changed the rows (another server process, a migration) and costs a scrape five
grouped counts, which the indexes and table sizes of a thousand hosts answer in milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from agents.vocabulary import Role
from backend.hosts.models import Device, Host
from backend.hosts.states import HostStatus
from backend.jobs.models import Job, Task
from backend.jobs.states import LIVE_TASK_STATUSES, JobStatus, TaskStatus
from backend.monitoring.instruments import ServerMetrics


@dataclass
class Counts:
    jobs: dict[str, int] = field(default_factory=dict)  # by status
    tasks: dict[tuple[str, str], int] = field(default_factory=dict)  # by (status, role)
    hosts: dict[str, int] = field(default_factory=dict)  # by status
    gpus: int = 0  # on online hosts
    gpus_allocated: int = 0  # held by live tasks
    cordoned: dict[str, str] = field(default_factory=dict)  # host -> its cordon's cause
    faults: dict[tuple[str, str], int] = field(default_factory=dict)  # by (host, kind)


async def read_counts(*, session: AsyncSession) -> Counts:
    """Jobs, tasks, hosts and GPUs as the database has them now (every status listed, 0 when
    none is in it, so that a series does not vanish when its last row changes)."""
    counts = Counts(
        jobs=dict.fromkeys(JobStatus, 0),
        tasks={(status, role): 0 for status in TaskStatus for role in Role},
        hosts=dict.fromkeys(HostStatus, 0),
    )
    for status, number in await session.execute(
        select(Job.status, func.count()).group_by(Job.status)
    ):
        counts.jobs[status] = number
    for task_status, role, number in await session.execute(
        select(Task.status, Task.role, func.count()).group_by(Task.status, Task.role)
    ):
        counts.tasks[(task_status, role)] = number
    for host_status, number in await session.execute(
        select(Host.status, func.count()).group_by(Host.status)
    ):
        counts.hosts[host_status] = number
    counts.gpus = int(
        await session.scalar(
            select(func.count(Device.id))
            .join(Host, Device.host_id == Host.id)
            .where(Host.status == HostStatus.online)
        )
        or 0
    )
    # gpu_indices is a JSON list on every task; json_array_length is SQLite's and PostgreSQL's.
    counts.gpus_allocated = int(
        await session.scalar(
            select(func.coalesce(func.sum(func.json_array_length(Task.gpu_indices)), 0)).where(
                Task.status.in_(LIVE_TASK_STATUSES), Task.host_id.is_not(None)
            )
        )
        or 0
    )
    # Only hosts cordoned or ever reported faulty are read: a healthy fleet returns no row.
    for name, cause, cordoned_at, faults in await session.execute(
        select(Host.name, Host.cordon_cause, Host.cordoned_at, Host.faults).where(
            or_(Host.cordoned_at.is_not(None), Host.faults_since.is_not(None))
        )
    ):
        if cordoned_at is not None:
            counts.cordoned[name] = cause or "manual"
        for fault in faults or []:
            key = (name, str(fault.get("kind")))
            counts.faults[key] = counts.faults.get(key, 0) + 1
    return counts


class CountsCollector(Collector):
    """Yields the counts of the scrape under way (set just before the text is generated)."""

    def __init__(self) -> None:
        self.counts = Counts()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self.counts
        jobs = GaugeMetricFamily("strata_jobs", "Jobs by status.", labels=["status"])
        for status, number in counts.jobs.items():
            jobs.add_metric([str(status)], number)
        yield jobs
        tasks = GaugeMetricFamily(
            "strata_tasks",
            "Tasks (their current attempts) by status and role.",
            labels=["status", "role"],
        )
        for (status, role), number in counts.tasks.items():
            tasks.add_metric([str(status), str(role)], number)
        yield tasks
        hosts = GaugeMetricFamily(
            "strata_hosts",
            "Hosts by status (online, or lost: heartbeats stopped).",
            labels=["status"],
        )
        for status, number in counts.hosts.items():
            hosts.add_metric([str(status)], number)
        yield hosts
        yield GaugeMetricFamily(
            "strata_gpus",
            "GPUs the online hosts offer (simulated ones included).",
            value=counts.gpus,
        )
        yield GaugeMetricFamily(
            "strata_gpus_allocated",
            "GPUs held by scheduled and running tasks.",
            value=counts.gpus_allocated,
        )
        cordoned = GaugeMetricFamily(
            "strata_host_cordoned",
            "1 for each cordoned host (it takes no new task), by what cordoned it: manual, "
            "fault or failures.",
            labels=["host", "cause"],
        )
        for host, cause in sorted(counts.cordoned.items()):
            cordoned.add_metric([host, cause], 1)
        yield cordoned
        faults = GaugeMetricFamily(
            "strata_host_faults",
            "Faults in each host's last health report, by kind (gpu_lost, ecc_uncorrected, "
            "retired_pages_pending, xid, disk_space, clock_offset).",
            labels=["host", "kind"],
        )
        for (host, kind), number in sorted(counts.faults.items()):
            faults.add_metric([host, kind], number)
        yield faults


class Scraper:
    """The text of `/metrics` for one server."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics
        self.collector = CountsCollector()
        metrics.registry.register(self.collector)

    async def scrape(self, *, session: AsyncSession) -> bytes:
        # No await between setting the counts and generating the text: a scrape running
        # beside this one cannot put its counts in between.
        counts = await read_counts(session=session)
        self.collector.counts = counts
        return generate_latest(self.metrics.registry)
