"""What an agent runs compared with what it should run, and the difference decided: for the
RunningTasks pass (heartbeats) and for an agent's hello (backend.scheduling.agent_reports).

A heartbeat asks for a comparison only when what the agent runs changed, or while a command
it has not answered yet may be due again (see AgentReports.on_heartbeat); a hello always does.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agents.protocol import RunningTask, TaskExit, TaskKey
from backend.db import in_pages, utcnow
from backend.hosts.models import Host
from backend.jobs.models import Job, Task
from backend.jobs.states import LIVE_TASK_STATUSES, TaskStatus
from backend.scheduling import started, task_events
from backend.scheduling.cluster import ClusterView
from backend.scheduling.transaction import Transaction

Placed = dict[TaskKey, tuple[Task, Job]]


def start_if_due(
    tx: Transaction, view: ClusterView, host: str, job: Job, task: Task, *, force: bool = False
) -> None:
    """Start a scheduled attempt once its backoff is over and its predecessor is gone (the
    earlier attempt holds the port)."""
    if task.restart_after is not None and task.restart_after > utcnow():
        return
    if view.old_attempt_running(job.id, task.name, task.attempt):
        return
    tx.start(host, job, task, force=force)


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
