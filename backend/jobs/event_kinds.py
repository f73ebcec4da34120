"""What a job event records: the `kind` of a job_events row, as clients see it in streams."""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    """The kinds of job event (stored as these short strings: no migration to add one)."""

    created = "created"  # the job was submitted
    status = "status"  # the job's status changed (from_status → to_status, the reason)
    task_status = "task_status"  # a task started, exited, was stopped or lost its host
    restart = "restart"  # tasks are restarted, by the restart policy or by request
    evaluator = "evaluator"  # the sidecar evaluator was requested, started or stopped
    checkpoint = "checkpoint"  # a runtime reported a checkpoint (streams carry it as its own frame)
