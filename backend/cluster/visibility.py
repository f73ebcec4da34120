"""The cluster view as a user sees it: every host and device, but only their projects' jobs."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.cluster.schemas import ClusterRead
from backend.jobs.models import Job


async def hide_other_projects(
    cluster: ClusterRead, *, session: AsyncSession, project_ids: Collection[int]
) -> ClusterRead:
    """The same view without the tasks of other projects' jobs: a device one of them holds
    shows no task (the totals still count it as taken, so free GPUs stay true)."""
    job_ids = {task.job_id for host in cluster.hosts for task in host.tasks}
    if not job_ids:
        return cluster
    visible = set(
        (
            await session.scalars(
                select(Job.id).where(Job.id.in_(job_ids), Job.project_id.in_(project_ids))
            )
        ).all()
    )
    for host in cluster.hosts:
        host.tasks = [task for task in host.tasks if task.job_id in visible]
        for device in host.devices:
            if device.task is not None and device.task.job_id not in visible:
                device.task = None
    return cluster
