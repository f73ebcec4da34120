"""Starts restarted attempts once their backoff is over and their predecessor has gone."""

from __future__ import annotations

from sqlalchemy import select

from backend.jobs.models import Job, Task
from backend.jobs.states import TERMINAL_JOB_STATUSES, TaskStatus
from backend.scheduling.cluster import ClusterView
from backend.scheduling.comparison import start_if_due
from backend.scheduling.transaction import Transaction


class RestartedTasks:
    def __init__(self, *, view: ClusterView) -> None:
        self.view = view

    async def reconcile(self, tx: Transaction) -> None:
        rows = await tx.session.execute(
            select(Task, Job)
            .join(Task.job)
            .where(Task.status == TaskStatus.scheduled, Task.restart_after.is_not(None))
            .where(Job.status.not_in(TERMINAL_JOB_STATUSES))
        )
        for task, job in rows:
            if task.host is not None and tx.agents.reachable(task.host.name):
                start_if_due(tx, self.view, task.host.name, job, task)
