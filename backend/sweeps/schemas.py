"""What the API returns for sweeps and their trials."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from backend.jobs.states import JobStatus
from backend.sweeps.spec import SweepSpec
from backend.sweeps.states import SweepStatus, TrialStatus


class TrialRead(BaseModel):
    number: int = Field(description="The trial's number in the sweep, from 0 (Optuna's).")
    job_id: int = Field(description="The job that runs it.")
    job_status: JobStatus
    params: dict[str, Any]
    status: TrialStatus
    value: float | None = Field(description="The objective's last value, once it ended.")
    curve: list[tuple[float, float]] = Field(
        description="The intermediate objective reported to the early stopping: "
        "[resource (epoch or step), value], in order."
    )
    reason: str | None = Field(description="Why it was pruned, failed or stopped.")
    created_at: datetime
    finished_at: datetime | None


class TrialCounts(BaseModel):
    running: int = 0
    succeeded: int = 0
    pruned: int = 0
    failed: int = 0
    stopped: int = 0


class SweepSummary(BaseModel):
    """A sweep in a list: its state, counts and best result, without its trials."""

    id: int
    name: str
    status: SweepStatus
    reason: str | None
    project: str
    submitted_by: str | None
    objective: str = Field(description="The metric searched on.")
    direction: Literal["minimize", "maximize"]
    resource: Literal["epochs", "steps"] = Field(description="What curves are counted in.")
    budget: int = Field(description="Trials in all.")
    parallel: int
    counts: TrialCounts
    best: TrialRead | None = Field(description="The best trial that succeeded, so far.")
    created_at: datetime
    finished_at: datetime | None


class SweepRead(SweepSummary):
    spec: SweepSpec
    trials: list[TrialRead]


class SweepStop(BaseModel):
    reason: str | None = Field(default=None, max_length=500, description="Recorded with the stop.")
