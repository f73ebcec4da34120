"""What a task's exit means for its job (ARCHITECTURE §4). Pure: no I/O, easy to test.

Success is decided by the chief's exit; with no chief (multi_worker_mirrored), by every worker
having exited 0; a mirrored job is its one task. Parameter-server ps and worker tasks serve
forever, so any exit of theirs while the job runs is a failure. The sidecar evaluator's exit
never decides the job.
"""

from __future__ import annotations

import signal as signals
from collections.abc import Sequence
from dataclasses import dataclass

from agents.memory_size import format_memory
from agents.vocabulary import Role, Strategy
from backend.jobs.states import JobStatus, TaskStatus


@dataclass(frozen=True)
class Outcome:
    task_status: TaskStatus
    job_status: JobStatus | None  # the job's new status, when this exit ends it
    reason: str


def describe_exit(
    task: str,
    exit_code: int | None,
    signal: int | None,
    error: str | None,
    over_memory_limit: int | None = None,
) -> str:
    if error is not None or exit_code is None:
        return f"{task} could not start: {error or 'unknown error'}"
    if over_memory_limit is not None and exit_code != 0:
        return f"{task} was killed: over its {format_memory(over_memory_limit)} memory limit"
    if signal:
        try:
            name = signals.Signals(signal).name
        except ValueError:
            name = f"signal {signal}"
        return f"{task} was killed by {name} (exit code {exit_code})"
    return f"{task} exited with code {exit_code}"


def judge_exit(
    *,
    strategy: str,
    role: str,
    task: str,
    exit_code: int | None,
    signal: int | None,
    error: str | None,
    job_status: JobStatus,
    sibling_statuses: Sequence[tuple[str, TaskStatus]],  # (role, status) of the other tasks
    over_memory_limit: int | None = None,  # the task's own limit, when it was killed over it
) -> Outcome:
    what = describe_exit(task, exit_code, signal, error, over_memory_limit)
    if job_status.is_terminal:
        # The job is over and we are stopping its tasks: this is one of them going.
        return Outcome(TaskStatus.stopped, None, what)
    clean = exit_code == 0 and error is None
    if role == Role.evaluator:
        return Outcome(TaskStatus.succeeded if clean else TaskStatus.failed, None, what)
    if not clean:
        return Outcome(TaskStatus.failed, JobStatus.failed, what)
    if strategy == Strategy.parameter_server and role in (Role.ps, Role.worker):
        return Outcome(
            TaskStatus.failed,
            JobStatus.failed,
            f"{what}, but a {role} must serve until the job ends",
        )
    has_chief = any(r == Role.chief for r, _ in sibling_statuses) or role == Role.chief
    if role == Role.chief or strategy == Strategy.mirrored:
        return Outcome(TaskStatus.succeeded, JobStatus.succeeded, what)
    # A multi_worker_mirrored worker finished cleanly.
    if not has_chief and all(
        status is TaskStatus.succeeded for r, status in sibling_statuses if r == Role.worker
    ):
        return Outcome(TaskStatus.succeeded, JobStatus.succeeded, f"all workers finished; {what}")
    return Outcome(TaskStatus.succeeded, None, what)
