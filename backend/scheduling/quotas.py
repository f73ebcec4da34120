"""Project quotas: how many GPUs a project's native jobs may hold at once.

A job whose project would go over its `max_gpus` waits with a reason that says so; jobs of
other projects behind it are placed as usual. Only placement is held: a quota lowered below
what a project already uses stops nothing. An executor with limits of its own (Slurm's, on
the project's Slurm account) has its jobs neither count nor wait here (Executor.counts_gpus).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.errors import FieldIssue, InvalidInput
from backend.jobs.models import Job, Task
from backend.jobs.states import LIVE_TASK_STATUSES
from backend.teams.models import Project


@dataclass
class GpuQuotas:
    """The GPU limits of the projects that have one, and what each holds, for one pass of
    placement (a job placed in the pass counts for the jobs after it)."""

    limits: dict[int, tuple[str, int]] = field(default_factory=dict)  # id -> (name, max_gpus)
    used: dict[int, int] = field(default_factory=dict)

    @classmethod
    async def load(
        cls, session: AsyncSession, *, uncounted: Sequence[Select[tuple[int]]]
    ) -> GpuQuotas:
        """The limits, and what each project holds but for the jobs `uncounted` names
        (Executors.uncounted_jobs)."""
        rows = await session.execute(
            select(Project.id, Project.name, Project.max_gpus).where(Project.max_gpus.is_not(None))
        )
        limits = {pid: (name, limit) for pid, name, limit in rows.all() if limit is not None}
        quotas = cls(limits=limits)
        if not limits:  # no quota anywhere: nothing to count
            return quotas
        held = await session.execute(
            select(Job.project_id, Task.gpu_indices)
            .join(Task, Task.job_id == Job.id)
            .where(
                Job.project_id.in_(list(limits)),
                Task.status.in_(LIVE_TASK_STATUSES),
                *(Job.id.not_in(query) for query in uncounted),
            )
        )
        for project_id, gpus in held.all():
            quotas.used[project_id] = quotas.used.get(project_id, 0) + len(gpus or [])
        return quotas

    def refusal(self, project_id: int, gpus: int) -> str | None:
        """Why a job of this project needing `gpus` must wait, or None if it may be placed."""
        if gpus == 0 or project_id not in self.limits:
            return None
        name, limit = self.limits[project_id]
        used = self.used.get(project_id, 0)
        if used + gpus <= limit:
            return None
        return f"project {name} uses {used} of its {limit} GPUs; this job needs {gpus}"

    def take(self, project_id: int, gpus: int) -> None:
        """Count a job just placed."""
        self.used[project_id] = self.used.get(project_id, 0) + gpus


def check_priority(*, project: Project, priority: int) -> None:
    """A job may not ask for more priority than its project's `max_priority` (422)."""
    if project.max_priority is not None and priority > project.max_priority:
        raise InvalidInput(
            [
                FieldIssue(
                    "priority",
                    f"priority {priority} is over the maximum of project {project.name}, "
                    f"{project.max_priority}",
                )
            ]
        )


class ProjectQuota(BaseModel):
    """A project's quotas (`PUT /projects/{name}/quota`); null is no limit."""

    model_config = ConfigDict(extra="forbid")

    max_gpus: Annotated[int, Field(ge=0, le=1_000_000)] | None = Field(
        default=None,
        description="GPUs the project's native jobs may hold at once; a job that would go over "
        "waits (running jobs are never stopped for it). Slurm jobs are limited by Slurm, "
        "through the project's Slurm account.",
    )
    # The spec's own bounds for priority (backend.jobs.spec).
    max_priority: Annotated[int, Field(ge=-100, le=100)] | None = Field(
        default=None, description="The highest priority a job of the project may ask for."
    )
    may_preempt_other_projects: bool = Field(
        default=True,
        description="Whether the project's jobs may preempt other projects' running jobs of "
        "lower priority (within its GPU quota). Its own jobs of lower priority, always.",
    )


class ProjectQuotaRead(ProjectQuota):
    project: str


def set_quota(*, project: Project, quota: ProjectQuota) -> ProjectQuota:
    """Replace the project's quotas; returns what they were."""
    before = ProjectQuota(
        max_gpus=project.max_gpus,
        max_priority=project.max_priority,
        may_preempt_other_projects=project.may_preempt_other_projects,
    )
    project.max_gpus, project.max_priority = quota.max_gpus, quota.max_priority
    project.may_preempt_other_projects = quota.may_preempt_other_projects
    return before
