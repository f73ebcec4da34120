"""A job's stored metric points as series: per task and name, attempts merged by step,
downsampled on request. Keyword-only and read-only, like the other services."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from backend.streams.downsample import min_max_indices
from backend.streams.models import MetricPoint
from backend.streams.schemas import Series

Point = tuple[int, float | None, float]  # step, value (None unless finite), wall time


async def metric_series(
    *,
    session: AsyncSession,
    job_id: int,
    names: Sequence[str] = (),
    task: str | None = None,
    since_step: int = 0,
    max_points: int | None = None,
) -> list[Series]:
    """The job's series from `since_step` on, only `names` and `task` when given, each cut
    to about `max_points` (keeping every bucket's extremes) when that is set."""
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
    grouped: dict[tuple[str, str], list[Point]] = defaultdict(list)
    for row_task, name, step, value, wall_time in await session.execute(statement):
        finite = value if value is not None and math.isfinite(value) else None
        grouped[(row_task, name)].append((step, finite, wall_time))
    return [
        _series(row_task, name, points, max_points) for (row_task, name), points in grouped.items()
    ]


def _series(task: str, name: str, points: list[Point], max_points: int | None) -> Series:
    keep = min_max_indices([p[1] for p in points], max_points) if max_points else range(len(points))
    chosen = [points[i] for i in keep]
    return Series(
        task=task,
        name=name,
        total_points=len(points),
        steps=[p[0] for p in chosen],
        values=[p[1] for p in chosen],
        wall_times=[p[2] for p in chosen],
    )
