"""Which requests a job admits now, from its status, spec and tasks. Pure: no I/O.

The routes refuse (409) what these rules refuse, and `JobRead.actions` reports them, so that
clients enable a control only when the server would accept it. A request can still fail for
what a job's state does not say: no host with room for the evaluator, a chief whose runtime
is not connected for a checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from pydantic import BaseModel, Field

from agents.vocabulary import Role, Strategy
from backend.jobs.spec import JobSpec
from backend.jobs.states import LIVE_TASK_STATUSES, JobStatus, TaskStatus, can_transition

# Cancel: any status that may still become cancelled (the unfinished ones).
CANCELLABLE = frozenset(s for s in JobStatus if can_transition(s, JobStatus.cancelled))
# Restart of the whole job (placed again): while it holds or is getting its hosts, or failed.
RESTARTABLE = frozenset(
    {JobStatus.scheduled, JobStatus.running, JobStatus.restarting, JobStatus.failed}
)
# The job holds its hosts: its tasks have their places (the evaluator can join them).
PLACED = frozenset({JobStatus.scheduled, JobStatus.running, JobStatus.restarting})
# Restart of one task where it runs: only while the job's tasks have their places.
TASK_RESTARTABLE = PLACED
# Checkpoint now: while the job trains, unless its workers can only save together (every
# worker takes part in a multi_worker_mirrored save, at epoch ends).
CHECKPOINTABLE = frozenset({JobStatus.running})
SAVES_TOGETHER = frozenset({Strategy.multi_worker_mirrored})
# Suspend: while the job waits for or holds its hosts; a checkpoint is taken first when it
# trains. Not a Slurm job (its allocation is Slurm's to give back) nor one whose coordinator
# is a client (the client's own process holds the training loop).
SUSPENDABLE = frozenset(s for s in JobStatus if can_transition(s, JobStatus.suspended))
# The sidecar evaluator starts while the job is unfinished (a pending job places it along).
EVALUATOR_STARTABLE = frozenset(s for s in JobStatus if not s.is_terminal)
# An evaluator task in these states counts as running: it cannot start again, it can stop.
EVALUATOR_ACTIVE = frozenset({TaskStatus.pending, *LIVE_TASK_STATUSES})


class TaskState(Protocol):
    """What the rules read of a task (a `Task` row or a `TaskRead`)."""

    @property
    def role(self) -> str: ...

    @property
    def status(self) -> TaskStatus: ...


class JobActions(BaseModel):
    """What the server would accept for this job now (an admin token assumed)."""

    cancel: bool = Field(description="POST /jobs/{id}/cancel")
    restart: bool = Field(description="POST /jobs/{id}/restart")
    task_restart: bool = Field(description="POST /jobs/{id}/tasks/{task}/restart")
    checkpoint: bool = Field(description="POST /jobs/{id}/checkpoint")
    evaluator_start: bool = Field(description='POST /jobs/{id}/evaluator {"action": "start"}')
    evaluator_stop: bool = Field(description='POST /jobs/{id}/evaluator {"action": "stop"}')
    suspend: bool = Field(description="POST /jobs/{id}/suspend")
    resume: bool = Field(description="POST /jobs/{id}/resume")


def is_training(task: TaskState) -> bool:
    """Whether the task trains (any but the evaluator): one of them writes checkpoints."""
    return task.role != Role.evaluator


def can_checkpoint(status: JobStatus, strategy: str) -> bool:
    return status in CHECKPOINTABLE and strategy not in SAVES_TOGETHER


def suspend_refusal(status: JobStatus, spec: JobSpec) -> str | None:
    """Why the job cannot be suspended now; None when it can."""
    if spec.slurm is not None:
        return "it runs as a Slurm job: Slurm gives its allocation back (scontrol requeue)"
    if spec.coordinator == "client":
        return "its coordinator is a client: stop training there, and detach"
    if status not in SUSPENDABLE:
        return f"it is {status}; only a job waiting for or holding its hosts can be"
    return None


def evaluator_active(evaluator: TaskState | None) -> bool:
    return evaluator is not None and evaluator.status in EVALUATOR_ACTIVE


def can_start_evaluator(status: JobStatus, spec: JobSpec, evaluator: TaskState | None) -> bool:
    # Without checkpoints it would have nothing to evaluate.
    return (
        status in EVALUATOR_STARTABLE and spec.checkpoint.saves and not evaluator_active(evaluator)
    )


def job_actions(status: JobStatus, spec: JobSpec, tasks: Iterable[TaskState]) -> JobActions:
    tasks = list(tasks)
    evaluator = next((task for task in tasks if task.role == Role.evaluator), None)
    return JobActions(
        cancel=status in CANCELLABLE,
        restart=status in RESTARTABLE,
        task_restart=status in TASK_RESTARTABLE,
        checkpoint=can_checkpoint(status, spec.strategy) and any(map(is_training, tasks)),
        evaluator_start=can_start_evaluator(status, spec, evaluator),
        evaluator_stop=evaluator_active(evaluator),
        suspend=suspend_refusal(status, spec) is None,
        resume=status == JobStatus.suspended,
    )
