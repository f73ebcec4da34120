"""What the metrics endpoint answers: one series per task and metric name."""

from __future__ import annotations

from pydantic import BaseModel


class Series(BaseModel):
    task: str
    name: str
    total_points: int  # before downsampling
    steps: list[int]
    values: list[float | None]  # null where the value was NaN or infinite
    wall_times: list[float]


class MetricsRead(BaseModel):
    job_id: int
    series: list[Series]
