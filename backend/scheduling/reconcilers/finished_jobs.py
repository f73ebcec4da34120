"""Stops what still runs of jobs that have ended, and drops their tasks that never started."""

from __future__ import annotations

from sqlalchemy import select

from backend.jobs.models import Job, Task
from backend.jobs.states import LIVE_TASK_STATUSES, TERMINAL_JOB_STATUSES, TaskStatus
from backend.scheduling.transaction import Transaction


class FinishedJobs:
    async def reconcile(self, tx: Transaction) -> None:
        rows = await tx.session.execute(
            select(Task, Job)
            .join(Task.job)
            .where(Job.status.in_(TERMINAL_JOB_STATUSES))
            .where(Task.status.in_([*LIVE_TASK_STATUSES, TaskStatus.pending]))
        )
        for task, job in rows:
            if task.status is TaskStatus.pending or task.host is None:
                task.status = TaskStatus.stopped
            else:
                tx.stop(task.host.name, task.key, f"job {job.id} is {job.status.value}")
