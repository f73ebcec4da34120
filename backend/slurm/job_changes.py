"""The changes the Slurm backend makes to Strata jobs, applied through the controller.

Each reads the job afresh inside the controller's transaction and changes it only if it is
still in the state the change was decided for: a cancel acknowledged meanwhile stays.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from backend.jobs.models import Job
from backend.jobs.states import JobStatus
from backend.scheduling.task_events import end_job
from backend.scheduling.transaction import Transaction

# Controller.apply, as the Slurm backend uses it.
Apply = Callable[..., Awaitable[Any]]


async def note_waiting(
    tx: Transaction, *, job_id: int, reason: str, slurm_job_id: str | None
) -> None:
    """The job's Slurm job id (whatever its status now), and Slurm's reason for the wait
    while the job is pending."""
    job = await tx.session.get(Job, job_id)
    if job is None:
        return
    if slurm_job_id is not None and job.slurm_job_id != slurm_job_id:
        job.slurm_job_id = slurm_job_id
    if job.status is JobStatus.pending and job.reason != reason:
        job.reason = reason


async def end_for_slurm(tx: Transaction, *, job_id: int, status: JobStatus, reason: str) -> None:
    """End a still active job because of what Slurm did (refused, cancelled, failed it)."""
    job = await tx.session.get(Job, job_id)
    if job is None or job.status.is_terminal:
        return
    await end_job(tx=tx, job=job, status=status, reason=reason)
