"""What the API returns for jobs, tasks and events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from backend.hosts.schemas import TaskStatsRead
from backend.jobs.actions import JobActions
from backend.jobs.models import JobClient
from backend.jobs.spec import JobSpec
from backend.jobs.states import JobStatus, TaskStatus


class TaskRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str  # "worker:1"
    role: str
    index: int
    status: TaskStatus
    host: str | None
    port: int | None
    gpus: list[int]
    pid: int | None
    attempt: int
    failure_count: int = Field(
        description="How many of its attempts followed a failure (the restart policy's "
        "per-task budget); `attempt` also counts requested restarts.",
    )
    exit_code: int | None
    started_at: datetime | None
    finished_at: datetime | None
    stats: TaskStatsRead | None = Field(
        default=None,
        description="CPU and memory of the current attempt's processes, sampled by its agent "
        "every few seconds while it runs.",
    )


class ClientRead(BaseModel):
    """The job's client coordinator: the one attached, or the last one."""

    session: int = Field(description="Its number: the attempt its metrics are reported under.")
    host: str
    pid: int
    actor: str | None = Field(description="Whose token attached it.")
    attached: bool
    attached_at: datetime
    seen_at: datetime = Field(description="Its last heartbeat.")
    detached_at: datetime | None

    @classmethod
    def of(cls, client: JobClient) -> ClientRead:
        return cls(
            session=client.session,
            host=client.host,
            pid=client.pid,
            actor=client.actor,
            attached=client.attached,
            attached_at=client.attached_at,
            seen_at=client.seen_at,
            detached_at=client.detached_at,
        )


class JobProgress(BaseModel):
    """Where a running job's training is, as its runtime last reported (kept in memory)."""

    step: int = Field(description="The global step trained.")
    total_steps: int | None = Field(
        default=None, description="Epochs x steps per epoch, where fit knows both."
    )
    epoch: int | None = Field(default=None, description="The epoch under way, 1-based.")
    epochs: int | None = Field(default=None, description="The epochs fit runs.")
    steps_per_second: float | None = Field(
        default=None, description="Over the last minute or so; null until two steps are seen."
    )
    eta_seconds: float | None = Field(
        default=None, description="Until total_steps at the current rate; null if unknown."
    )
    busy: str | None = Field(
        default=None,
        description="tracing, evaluating, checkpointing or exporting: what keeps the step "
        "from advancing now, if anything.",
    )
    updated_at: datetime = Field(description="When the step last advanced.")


class JobRead(BaseModel):
    id: int
    name: str
    status: JobStatus
    reason: str | None
    strategy: str
    priority: int
    restart_count: int = Field(
        description="Its restarts after failures and by request. An interruption (suspend, "
        "preemption, drain, notice, a Slurm requeue) is not one."
    )
    failure_count: int = Field(
        description="Its restarts after failures: only these count against the spec's "
        "restart.max_restarts and its backoff.",
    )
    spec: JobSpec
    tasks: list[TaskRead]
    actions: JobActions = Field(description="What the server would accept for this job now.")
    slurm_job_id: str | None = Field(
        default=None, description="The id of the Slurm job it runs as (spec.slurm), once submitted."
    )
    project_id: int = Field(description="The project it belongs to (spec.project names it).")
    submitted_by: str | None = Field(
        default=None, description="Who submitted it (a user's name, or which token)."
    )
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    client: ClientRead | None = Field(
        default=None,
        description="coordinator: client only: the client attached now, or the last one "
        "(in the one-job read; null in lists).",
    )
    progress: JobProgress | None = Field(
        default=None,
        description="Where training is while it runs; null before the first report and once "
        "the job has ended.",
    )


class JobPage(BaseModel):
    items: list[JobRead]
    total: int
    limit: int
    offset: int


class LogPage(BaseModel):
    task: str
    attempt: int
    first_line: int  # number (0-based) of the first line returned
    lines: list[str]
    total_lines: int  # lines in this attempt's log so far; the next offset to ask for


class JobEventRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    at: datetime
    kind: str
    task: str | None
    from_status: str | None
    to_status: str | None
    message: str | None
    data: dict[str, Any]
    actor: str | None = Field(
        default=None,
        description='Who caused it through the API ("alice", "admin token 3"); null for what '
        "the system did itself.",
    )
