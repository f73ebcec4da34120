"""Sweeps as the API reads and changes them. Services flush; the router commits."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from backend.db import utcnow
from backend.errors import Conflict, Forbidden, NotFound
from backend.jobs.models import Job
from backend.jobs.states import JobStatus
from backend.sweeps.models import Sweep, SweepTrial
from backend.sweeps.schemas import SweepRead, SweepSummary, TrialCounts, TrialRead
from backend.sweeps.spec import SweepSpec
from backend.sweeps.states import SweepStatus, TrialStatus
from backend.teams.access import Access
from backend.teams.models import Project
from backend.teams.roles import ProjectRole


async def create_sweep(
    *, session: AsyncSession, spec: SweepSpec, project: Project, submitted_by: str | None
) -> Sweep:
    """Store the sweep as running: the sweep runner (backend.scheduling.sweep_runner) asks
    for its trials and starts them as jobs."""
    sweep = Sweep(
        name=spec.name,
        status=SweepStatus.running,
        spec=spec.model_dump(mode="json"),
        project_id=project.id,
        submitted_by=submitted_by,
        trials=[],
    )
    session.add(sweep)
    await session.flush()
    return sweep


async def visible_sweep(
    *, session: AsyncSession, access: Access, sweep_id: int, needed: ProjectRole
) -> Sweep:
    """The sweep with its trials; one of a project the caller has no role in is as missing
    as one that does not exist."""
    sweep = await session.scalar(
        select(Sweep).where(Sweep.id == sweep_id).options(selectinload(Sweep.trials))
    )
    role = None if sweep is None else access.role_in(sweep.project_id)
    if sweep is None or role is None:
        raise NotFound(f"sweep {sweep_id} does not exist")
    if role < needed:
        raise Forbidden(
            f"{access.principal.label} is a {role} of the sweep's project; "
            f"this needs a {needed} or an admin of it"
        )
    return sweep


async def request_stop(*, session: AsyncSession, sweep: Sweep, reason: str | None) -> None:
    """Stop a running sweep: it asks for no more trials, and the runner cancels the running
    ones. Stopping one that is already stopping changes nothing."""
    if sweep.status is SweepStatus.stopping:
        return
    if sweep.status is not SweepStatus.running:
        raise Conflict(f"sweep {sweep.id} is {sweep.status}; only a running sweep can stop")
    sweep.status = SweepStatus.stopping
    sweep.reason = reason or "stopped by request"
    sweep.updated_at = utcnow()
    await session.flush()


async def list_sweeps(
    *,
    session: AsyncSession,
    access: Access,
    project: Project | None,
    statuses: Sequence[SweepStatus],
) -> list[SweepSummary]:
    query = select(Sweep).options(selectinload(Sweep.trials)).order_by(Sweep.id.desc())
    if project is not None:
        query = query.where(Sweep.project_id == project.id)
    elif (ids := access.project_ids) is not None:
        query = query.where(Sweep.project_id.in_(ids))
    if statuses:
        query = query.where(Sweep.status.in_(statuses))
    sweeps = list(await session.scalars(query))
    names = await _project_names(session, {s.project_id for s in sweeps})
    jobs = await job_statuses(session, [t.job_id for s in sweeps for t in s.trials])
    return [summary(s, names[s.project_id], jobs) for s in sweeps]


async def read_sweep(*, session: AsyncSession, sweep: Sweep) -> SweepRead:
    names = await _project_names(session, {sweep.project_id})
    jobs = await job_statuses(session, [t.job_id for t in sweep.trials])
    base = summary(sweep, names[sweep.project_id], jobs)
    return SweepRead(
        **base.model_dump(exclude={"best"}),
        best=base.best,
        spec=sweep.sweep_spec,
        trials=[trial_read(t, jobs[t.job_id]) for t in sweep.trials],
    )


def summary(sweep: Sweep, project: str, jobs: dict[int, JobStatus]) -> SweepSummary:
    spec = sweep.sweep_spec
    counts = TrialCounts()
    for trial in sweep.trials:
        setattr(counts, trial.status.value, getattr(counts, trial.status.value) + 1)
    best = best_trial(sweep.trials, spec.objective.direction)
    return SweepSummary(
        id=sweep.id,
        name=sweep.name,
        status=sweep.status,
        reason=sweep.reason,
        project=project,
        submitted_by=sweep.submitted_by,
        objective=spec.objective.metric,
        direction=spec.objective.direction,
        resource=spec.early_stopping.resource,
        budget=spec.budget.trials,
        parallel=spec.budget.parallel,
        counts=counts,
        best=None if best is None else trial_read(best, jobs[best.job_id]),
        created_at=sweep.created_at,
        finished_at=sweep.finished_at,
    )


def best_trial(trials: Sequence[SweepTrial], direction: str) -> SweepTrial | None:
    """The succeeded trial with the best objective (the earliest of equals)."""
    done = [t for t in trials if t.status is TrialStatus.succeeded and t.value is not None]
    if not done:
        return None
    sign = 1.0 if direction == "minimize" else -1.0
    return min(done, key=lambda t: (sign * (t.value or 0.0), t.number))


def trial_read(trial: SweepTrial, job_status: JobStatus) -> TrialRead:
    return TrialRead(
        number=trial.number,
        job_id=trial.job_id,
        job_status=job_status,
        params=trial.params,
        status=trial.status,
        value=trial.value,
        curve=[(float(r), float(v)) for r, v in trial.curve or []],
        reason=trial.reason,
        created_at=trial.created_at,
        finished_at=trial.finished_at,
    )


async def job_statuses(session: AsyncSession, ids: Sequence[int]) -> dict[int, JobStatus]:
    """Each of these jobs' status, by id."""
    if not ids:
        return {}
    rows = await session.execute(select(Job.id, Job.status).where(Job.id.in_(ids)))
    return {job_id: status for job_id, status in rows}


async def _project_names(session: AsyncSession, ids: set[int]) -> dict[int, str]:
    if not ids:
        return {}
    rows = await session.execute(select(Project.id, Project.name).where(Project.id.in_(ids)))
    return {project_id: name for project_id, name in rows}
