"""A job's metric series, optionally downsampled for drawing."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import StringConstraints

from agents.protocol import METRIC_NAME_PATTERN
from agents.vocabulary import TaskNameText
from backend.api.deps import JobId, JobReader, SessionDep
from backend.errors import ROUTER_ERRORS, closed_query, error_responses
from backend.streams.schemas import MetricsRead
from backend.streams.series import metric_series

router = APIRouter(
    prefix="/jobs/{job_id}",
    tags=["metrics"],
    responses=ROUTER_ERRORS,
    dependencies=[Depends(closed_query)],
)


@router.get("/metrics", response_model=MetricsRead, responses=error_responses(404))
async def read_metrics(
    job_id: JobId,
    session: SessionDep,
    _: JobReader,
    names: Annotated[
        list[Annotated[str, StringConstraints(pattern=METRIC_NAME_PATTERN)]],
        Query(max_length=100, description="Only these metrics."),
    ] = [],  # noqa: B006 - FastAPI copies query defaults
    task: Annotated[TaskNameText | None, Query()] = None,
    since_step: Annotated[int, Query(ge=0, le=2**62)] = 0,
    max_points: Annotated[
        int | None, Query(ge=2, le=100_000, description="Downsample each series to about this.")
    ] = None,
) -> MetricsRead:
    """Metric series per task and name (attempts merged by step), downsampled when asked."""
    series = await metric_series(
        session=session,
        job_id=job_id,
        names=names,
        task=task,
        since_step=since_step,
        max_points=max_points,
    )
    return MetricsRead(job_id=job_id, series=series)
