"""What the sweep runner reads, each in a short session of its own: sweeps with their
trials, their jobs' statuses, and a trial's objective values from its job's metric points."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import selectinload

from agents.vocabulary import Role, TaskName
from backend.jobs.models import Job
from backend.jobs.states import JobStatus
from backend.streams.models import MetricPoint
from backend.sweeps import service
from backend.sweeps.models import Sweep
from backend.sweeps.spec import SweepSpec
from backend.sweeps.states import SweepStatus
from backend.teams.models import Project

Sessions = async_sessionmaker[AsyncSession]
UNFINISHED = (SweepStatus.running, SweepStatus.stopping)
EPOCH = "epoch"  # the runtime streams it at every epoch end, at the same step as the others


@dataclass(frozen=True)
class Point:
    """One value of the objective as a task reported it."""

    resource: int | None  # the epoch (or step) it belongs to; None: not at an epoch end
    value: float
    order: tuple[int, int, int]  # (attempt, step, seq): the greatest is the newest


async def unfinished_sweeps(sessions: Sessions) -> list[Sweep]:
    async with sessions() as session:
        query = (
            select(Sweep)
            .where(Sweep.status.in_(UNFINISHED))
            .options(selectinload(Sweep.trials))
            .order_by(Sweep.id)
        )
        return list(await session.scalars(query))


async def sweep_with_trials(sessions: Sessions, sweep_id: int) -> Sweep:
    async with sessions() as session:
        query = select(Sweep).where(Sweep.id == sweep_id).options(selectinload(Sweep.trials))
        return (await session.scalars(query)).one()


async def job_statuses(sessions: Sessions, ids: list[int]) -> dict[int, JobStatus]:
    async with sessions() as session:
        return await service.job_statuses(session, ids)


async def job_reason(sessions: Sessions, job_id: int) -> str:
    async with sessions() as session:
        return await session.scalar(select(Job.reason).where(Job.id == job_id)) or ""


async def project_name(sessions: Sessions, project_id: int) -> str:
    async with sessions() as session:
        return await session.scalar(select(Project.name).where(Project.id == project_id)) or ""


async def objective_points(sessions: Sessions, job_id: int, spec: SweepSpec) -> list[Point]:
    """The objective's values from one task of the job (the first of chief, worker 0, ...
    that reported it), each with the epoch (or step) it was reported at."""
    metric = spec.objective.metric
    async with sessions() as session:
        result = await session.execute(
            select(
                MetricPoint.task,
                MetricPoint.attempt,
                MetricPoint.step,
                MetricPoint.seq,
                MetricPoint.name,
                MetricPoint.value,
            ).where(MetricPoint.job_id == job_id, MetricPoint.name.in_((metric, EPOCH)))
        )
        rows: list[tuple[str, int, int, int, str, float | None]] = [
            (r.task, r.attempt, r.step, r.seq, r.name, r.value) for r in result
        ]
    reporting = sorted({r[0] for r in rows if r[4] == metric}, key=_task_order)
    if not reporting:
        return []
    task = reporting[0]
    epochs = {(a, s): v for t, a, s, _, n, v in rows if t == task and n == EPOCH}
    by_epochs = spec.early_stopping.resource == "epochs"
    points = []
    for t, attempt, step, seq, name, value in rows:
        if t != task or name != metric or value is None or not math.isfinite(value):
            continue
        epoch = epochs.get((attempt, step))
        resource = (None if epoch is None else int(epoch)) if by_epochs else int(step)
        points.append(Point(resource, float(value), (attempt, step, seq)))
    return points


def intermediate(points: Sequence[Point], *, after: int) -> list[tuple[int, float]]:
    """Each epoch's (or step's) value after `after`, in order; a resource reported again (by
    a restarted attempt) counts with its newest value."""
    newest: dict[int, Point] = {}
    for point in points:
        if point.resource is None or point.resource <= after:
            continue
        kept = newest.get(point.resource)
        if kept is None or point.order > kept.order:
            newest[point.resource] = point
    return [(resource, newest[resource].value) for resource in sorted(newest)]


def _task_order(task: str) -> tuple[int, int]:
    """chief, worker:0, worker:1, ..., ps, evaluator: whose report of the objective counts."""
    try:
        name = TaskName.parse(task)
    except ValueError:
        return len(Role), 0
    return list(Role).index(name.role), name.index
