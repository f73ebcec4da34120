"""What Slurm's view of a job means for the Strata job: its pending reason, or its end."""

from __future__ import annotations

from dataclasses import dataclass

from backend.jobs.states import JobStatus


@dataclass(frozen=True)
class SlurmView:
    """Slurm's latest word on one job: from squeue, else sacct, else nothing (None state)."""

    slurm_job_id: str
    state: str | None  # None: neither squeue nor the accounting knows the job any more
    reason: str = ""  # squeue's reason (Resources, Priority), or sacct's "by 0"
    nodes: str = ""
    exit_code: str = ""


@dataclass(frozen=True)
class Ending:
    status: JobStatus
    reason: str


def waiting_reason(view: SlurmView) -> str:
    """The reason a pending Strata job shows while its Slurm job is live."""
    if view.state == "PENDING":
        reason = view.reason if view.reason and view.reason != "None" else "queued"
        return f"Slurm: {reason}"
    if view.state in ("RUNNING", "CONFIGURING"):
        return f"Slurm: running on {view.nodes or 'its nodes'}, waiting for its agents"
    return f"Slurm: {view.state}"


def ending(view: SlurmView) -> Ending:
    """How a Strata job that was still active ends when its Slurm job has ended."""
    job = f"Slurm job {view.slurm_job_id}"
    state = view.state
    if state is None:
        return Ending(JobStatus.failed, f"{job} is no longer known to Slurm")
    if state == "CANCELLED":
        by = f", {view.reason}" if view.reason.startswith("by ") else ""
        return Ending(JobStatus.cancelled, f"{job} was cancelled outside Strata (CANCELLED{by})")
    known = {
        "TIMEOUT": f"{job} reached its time limit (TIMEOUT)",
        "PREEMPTED": f"{job} was preempted (PREEMPTED)",
        "NODE_FAIL": f"a node of {job} failed (NODE_FAIL)",
        "OUT_OF_MEMORY": f"{job} ran out of memory (OUT_OF_MEMORY)",
        "BOOT_FAIL": f"the nodes of {job} failed to boot (BOOT_FAIL)",
        "DEADLINE": f"{job} missed its deadline (DEADLINE)",
        "COMPLETED": f"{job} ended (COMPLETED) before the Strata job did",
    }
    if state in known:
        return Ending(JobStatus.failed, known[state])
    code = f", exit code {view.exit_code}" if view.exit_code else ""
    return Ending(JobStatus.failed, f"{job} ended {state}{code}")
