"""Compares what agents say they run with what they should run, and sends the difference.

A heartbeat asks for a comparison only when what the agent runs changed, or while a command
it has not answered yet may be due again (see AgentReports.on_heartbeat); a hello always does.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agents.protocol import RunningTask, TaskExit, TaskKey
from agents.vocabulary import format_task_name
from backend.db import in_pages, utcnow
from backend.hosts.models import Host
from backend.jobs.models import Job, Task
from backend.jobs.states import (
    ACTIVE_JOB_STATUSES,
    LIVE_TASK_STATUSES,
    HostStatus,
    TaskStatus,
)
from backend.scheduling import started, task_events
from backend.scheduling.cluster import ClusterView
from backend.scheduling.reconcilers.reported_starts import hosts_named
from backend.scheduling.reconcilers.restarted_tasks import start_if_due
from backend.scheduling.transaction import Transaction

Placed = dict[TaskKey, tuple[Task, Job]]


async def placed_on(session: AsyncSession, host_ids: list[int]) -> dict[int, Placed]:
    """Per host, the attempts it should run: the live tasks placed on it, with their jobs."""
    placed: dict[int, Placed] = {}
    if not host_ids:
        return placed
    tasks = list(
        await session.scalars(
            select(Task).where(Task.host_id.in_(host_ids), Task.status.in_(LIVE_TASK_STATUSES))
        )
    )
    # The jobs in a query of their own: joined to their tasks, each job's row (its spec,
    # JSON) would come and be decoded once per task.
    job_ids = sorted({task.job_id for task in tasks})
    jobs: dict[int, Job] = {}
    for page in in_pages(job_ids):
        jobs.update(
            (job.id, job) for job in await session.scalars(select(Job).where(Job.id.in_(page)))
        )
    for task in tasks:
        assert task.host_id is not None
        placed.setdefault(task.host_id, {})[task.key] = (task, jobs[task.job_id])
    return placed


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


def note_after_commit(
    tx: Transaction, view: ClusterView, host: str, running: list[RunningTask], agrees: bool
) -> None:
    """Once committed, note what the host reported and whether it was found to agree."""
    keys = frozenset(r.key for r in running)
    tx.after_commit.append(
        lambda: view.compared(host, keys, agrees, commanded=host in tx.outbox.hosts())
    )


async def sync_running(
    tx: Transaction,
    view: ClusterView,
    host: Host,
    running: list[RunningTask],
    placed_here: Placed,
    *,
    force: bool,
) -> bool:
    """Compare what the agent runs with what it should run (`placed_here`, from placed_on),
    and decide the difference. Returns whether the two agree once this is applied, with
    nothing left to start or stop."""
    reported = {r.key: r.pid for r in running}
    agrees = True
    for key, pid in reported.items():
        task, job = placed_here.get(key, (None, None))
        if not task_events.wanted_on(task, job, host, key):
            tx.stop(host.name, key, "this attempt should not run", force=force)
            agrees = False
        elif task is not None and task.status is TaskStatus.scheduled:
            # Its task_started was lost with a dropped connection, or is not applied yet
            # (then how it started is known already: the report came before this heartbeat).
            agrees = False  # compared again soon: what this changed was not loaded
            mode = view.start_modes.pop(key, None)
            await started.mark_started_many(
                tx=tx, starts=[(host, key, pid)], modes={key: mode} if mode else None
            )
    for key, (task, job) in placed_here.items():
        if key in reported:
            continue
        if job.status.is_terminal:
            view.capacity_changed()
            task.status, task.finished_at = TaskStatus.stopped, utcnow()
        elif task.status is TaskStatus.running:
            # Exits travel before heartbeats on the same channel: this one went unseen.
            gone = TaskExit(key=key, exit_code=None, error="the agent no longer runs it")
            agrees = False  # a restart it causes may place attempts here
            view.capacity_changed()
            await task_events.apply_exit(tx=tx, host=host, exit=gone, vanished=True)
        else:
            start_if_due(tx, view, host.name, job, task, force=force)
            agrees = False
    return agrees


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
