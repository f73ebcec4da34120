"""Compares what agents say they run with what they should run, and sends the difference
(backend.scheduling.comparison)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agents.protocol import RunningTask
from agents.vocabulary import format_task_name
from backend.hosts.states import HostStatus
from backend.jobs.models import Job, Task
from backend.jobs.states import ACTIVE_JOB_STATUSES, LIVE_TASK_STATUSES, TaskStatus
from backend.scheduling.cluster import ClusterView
from backend.scheduling.comparison import note_after_commit, placed_on, sync_running
from backend.scheduling.start_reports import hosts_named
from backend.scheduling.transaction import Transaction


async def agreeing(session: AsyncSession, reports: dict[int, list[RunningTask]]) -> set[int]:
    """The hosts (of `reports`, by host id) that run exactly what they should, every attempt
    of it running, from plain rows: nothing to change, so no task or job is loaded for them.
    Most hosts agree most of the time, and loading their tasks and jobs only to find that
    would dominate each pass."""
    if not reports:
        return set()
    should: dict[int, set[tuple[int, str, int]]] = {host_id: set() for host_id in reports}
    doubtful: set[int] = set()  # a live attempt not yet running, or of a job that has ended
    for host_id, job_id, role, index, attempt, status, job_status in await session.execute(
        select(
            Task.host_id,
            Task.job_id,
            Task.role,
            Task.index,
            Task.attempt,
            Task.status,
            Job.status,
        )
        .join(Task.job)
        .where(Task.host_id.in_(list(reports)), Task.status.in_(LIVE_TASK_STATUSES))
    ):
        assert host_id is not None
        if status is not TaskStatus.running or job_status not in ACTIVE_JOB_STATUSES:
            doubtful.add(host_id)
        should[host_id].add((job_id, format_task_name(role, index), attempt))
    return {
        host_id
        for host_id, running in reports.items()
        if host_id not in doubtful
        and should[host_id] == {(r.key.job_id, r.key.task, r.key.attempt) for r in running}
    }


class RunningTasks:
    """Compares each host whose heartbeat asked for it, all in one query."""

    def __init__(self, *, view: ClusterView) -> None:
        self.view = view

    async def reconcile(self, tx: Transaction) -> None:
        reports, self.view.to_compare = self.view.to_compare, {}
        hosts = await hosts_named(tx.session, list(reports))
        by_id = {host.id: reports[name] for name, host in hosts.items()}
        settled = await agreeing(tx.session, by_id)
        placed = await placed_on(tx.session, [i for i in by_id if i not in settled])
        for name, running in reports.items():
            host = hosts.get(name)
            if host is None:
                continue
            if host.status is not HostStatus.online:
                host.status = HostStatus.online
            if host.id in settled:
                agrees = True
            else:
                here = placed.get(host.id, {})
                agrees = await sync_running(tx, self.view, host, running, here, force=False)
            note_after_commit(tx, self.view, name, running, agrees)
