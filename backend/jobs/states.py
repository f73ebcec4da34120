"""Job and task states, and which changes between them are legal. Pure data, no I/O."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    pending = "pending"  # waiting for room on the cluster
    scheduled = "scheduled"  # every task placed; agents are starting them
    running = "running"  # every training task runs
    restarting = "restarting"  # some tasks are being restarted by policy or by request
    suspended = "suspended"  # stopped on request after a checkpoint; holds no host until resumed
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_JOB_STATUSES


TERMINAL_JOB_STATUSES = frozenset({JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled})
ACTIVE_JOB_STATUSES = frozenset(set(JobStatus) - TERMINAL_JOB_STATUSES)
# A job in these statuses has placed tasks (an interruption may move them).
PLACED_JOB_STATUSES = frozenset({JobStatus.scheduled, JobStatus.running, JobStatus.restarting})

_J = JobStatus
JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    _J.pending: frozenset({_J.scheduled, _J.suspended, _J.failed, _J.cancelled}),
    # Back to pending when a placement is withdrawn (its host was lost before start).
    # Straight to succeeded when the deciding task finishes before a sibling's start is heard.
    _J.scheduled: frozenset(
        {
            _J.running,
            _J.pending,
            _J.restarting,
            _J.suspended,
            _J.succeeded,
            _J.failed,
            _J.cancelled,
        }
    ),
    _J.running: frozenset(
        {_J.succeeded, _J.failed, _J.cancelled, _J.restarting, _J.pending, _J.suspended}
    ),
    _J.restarting: frozenset(
        {_J.scheduled, _J.running, _J.pending, _J.suspended, _J.failed, _J.cancelled}
    ),
    # Resumed: placed again, to continue from the checkpoint taken when it was suspended.
    _J.suspended: frozenset({_J.pending, _J.cancelled}),
    # A failed job may be restarted by hand; succeeded and cancelled jobs are final.
    _J.failed: frozenset({_J.restarting}),
    _J.succeeded: frozenset(),
    _J.cancelled: frozenset(),
}


def can_transition(current: JobStatus, target: JobStatus) -> bool:
    return target in JOB_TRANSITIONS[current]


class TaskStatus(StrEnum):
    pending = "pending"  # not placed yet
    scheduled = "scheduled"  # placed on a host; the agent has not reported it started
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    stopped = "stopped"  # stopped by the control plane (job over, cancel, restart)
    lost = "lost"  # its host went silent


# A task in these states holds its host's port and GPUs, and an agent runs or will run it.
LIVE_TASK_STATUSES = (TaskStatus.scheduled, TaskStatus.running)
