"""A job's metric series, optionally downsampled for drawing."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, StringConstraints
from sqlalchemy import select

from agents.protocol import METRIC_NAME_PATTERN
from backend.api.deps import ReaderPrincipal, SessionDep
from backend.api.jobs import JobId
from backend.errors import ROUTER_ERRORS, closed_query, error_responses
from backend.jobs import service
from backend.streams.downsample import min_max_indices
from backend.streams.models import MetricPoint

router = APIRouter(
    prefix="/jobs/{job_id}",
    tags=["metrics"],
    responses=ROUTER_ERRORS,
    dependencies=[Depends(closed_query)],
)


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


@router.get("/metrics", response_model=MetricsRead, responses=error_responses(404))
async def read_metrics(
    job_id: JobId,
    session: SessionDep,
    _: ReaderPrincipal,
    names: Annotated[
        list[Annotated[str, StringConstraints(pattern=METRIC_NAME_PATTERN)]],
        Query(max_length=100, description="Only these metrics."),
    ] = [],  # noqa: B006 - FastAPI copies query defaults
    task: Annotated[str | None, Query(pattern=r"^(chief|worker|ps|evaluator):\d{1,4}$")] = None,
    since_step: Annotated[int, Query(ge=0, le=2**62)] = 0,
    max_points: Annotated[
        int | None, Query(ge=2, le=100_000, description="Downsample each series to about this.")
    ] = None,
) -> MetricsRead:
    """Metric series per task and name (attempts merged by step), downsampled when asked."""
    await service.get_job(session=session, job_id=job_id)
    statement = (
        select(
            MetricPoint.task,
            MetricPoint.name,
            MetricPoint.step,
            MetricPoint.value,
            MetricPoint.wall_time,
        )
        .where(MetricPoint.job_id == job_id, MetricPoint.step >= since_step)
        .order_by(
            MetricPoint.task,
            MetricPoint.name,
            MetricPoint.step,
            MetricPoint.attempt,
            MetricPoint.seq,
        )
    )
    if names:
        statement = statement.where(MetricPoint.name.in_(names))
    if task:
        statement = statement.where(MetricPoint.task == task)
    grouped: dict[tuple[str, str], list[tuple[int, float | None, float]]] = defaultdict(list)
    for row_task, name, step, value, wall_time in await session.execute(statement):
        finite = value if value is not None and math.isfinite(value) else None
        grouped[(row_task, name)].append((step, finite, wall_time))
    series = []
    for (row_task, name), points in grouped.items():
        keep = (
            min_max_indices([p[1] for p in points], max_points)
            if max_points
            else range(len(points))
        )
        chosen = [points[i] for i in keep]
        series.append(
            Series(
                task=row_task,
                name=name,
                total_points=len(points),
                steps=[p[0] for p in chosen],
                values=[p[1] for p in chosen],
                wall_times=[p[2] for p in chosen],
            )
        )
    return MetricsRead(job_id=job_id, series=series)
