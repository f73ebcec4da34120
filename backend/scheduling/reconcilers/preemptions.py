"""Priority preemption: the pending job of highest priority that fits nowhere (its quota
allowing it) interrupts the running jobs of lower priority that make room for it
(`scheduling/preemption.py` chooses them), other projects' jobs only where its project may
preempt them (`may_preempt_other_projects`). Their interruptions run outside the pass
(`Interrupter`); the job waits until what they ran has stopped, then PendingJobs places it
first. One plan at a time: its victims are spoken for until it is placed or gone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from sqlalchemy import func, select
from sqlalchemy.orm import selectinload

from agents.vocabulary import Strategy
from backend.config import Settings
from backend.jobs.actions import suspend_refusal
from backend.jobs.models import Job
from backend.jobs.states import LIVE_TASK_STATUSES, JobStatus, TaskStatus
from backend.scheduling.cluster import ClusterView
from backend.scheduling.executors import PassHosts
from backend.scheduling.placement import TaskNeed
from backend.scheduling.preemption import Candidate, HeldPlace, fits, plan_preemption
from backend.scheduling.quotas import GpuQuotas
from backend.scheduling.transaction import Transaction
from backend.teams.models import Project

# Pending jobs of higher priority a pass tries to make room for, the highest first.
PLANS_TRIED_PER_PASS = 10


class Interrupts(Protocol):
    """What the pass asks of the interrupter (scheduling/interruptions.Interrupter)."""

    @property
    def in_flight(self) -> Mapping[int, object]: ...

    def preempt(self, job_id: int, by_id: int) -> None: ...


class Preemptions:
    def __init__(self, *, view: ClusterView, settings: Settings, interrupter: Interrupts) -> None:
        self.view = view
        self.settings = settings
        self.interrupter = interrupter

    def preemptible(self, job: Job) -> bool:
        spec = job.job_spec
        allowed = spec.preemptible if spec.preemptible is not None else self.settings.preemptible
        return allowed and suspend_refusal(job.status, spec) is None

    async def reconcile(self, tx: Transaction) -> None:
        session, plans = tx.session, self.view.preempting
        if plans:
            still = set(
                await session.scalars(
                    select(Job.id).where(Job.id.in_(plans), Job.status == JobStatus.pending)
                )
            )
            for job_id in set(plans) - still:
                del plans[job_id]  # placed, cancelled or suspended meanwhile
            if plans:
                return
        # Two aggregates first: a pass runs for every submission, and a queue of thousands of
        # jobs with nothing of lower priority running must cost it nothing more.
        lowest = await session.scalar(
            select(func.min(Job.priority)).where(Job.status == JobStatus.running)
        )
        highest = await session.scalar(
            select(func.max(Job.priority)).where(Job.status == JobStatus.pending)
        )
        if lowest is None or highest is None or highest <= lowest:
            return
        pending = list(
            await session.scalars(
                select(Job)
                .where(Job.status == JobStatus.pending, Job.priority > lowest)
                .order_by(Job.priority.desc(), Job.id)
                .limit(PLANS_TRIED_PER_PASS)
                .options(selectinload(Job.tasks))
            )
        )
        running = list(
            await session.scalars(
                select(Job)
                .where(Job.status == JobStatus.running, Job.priority < highest)
                .options(selectinload(Job.tasks))
            )
        )
        in_flight = self.interrupter.in_flight
        candidates = [
            candidate(job) for job in running if job.id not in in_flight and self.preemptible(job)
        ]
        candidates = [c for c in candidates if c.places]
        if not candidates:
            return
        own_only = set(
            await session.scalars(
                select(Project.id).where(
                    Project.id.in_({job.project_id for job in pending}),
                    Project.may_preempt_other_projects.is_(False),
                )
            )
        )
        hosts = PassHosts.of(await tx.agents.capacities(session), tx.agents).unbound
        quotas = await GpuQuotas.load(session, uncounted=tx.executors.uncounted_jobs())
        for job in pending:
            spec = job.job_spec
            if spec.slurm is not None:
                continue  # placed in its own allocation: other jobs' hosts are not its room
            needs = [
                TaskNeed(t.role, t.index, spec.replicas.of(t.role).gpus)
                for t in job.tasks
                if t.status is TaskStatus.pending
            ]
            if quotas.refusal(job.project_id, sum(n.gpus for n in needs)) is not None:
                continue  # its quota holds it, not the room
            if fits(needs, hosts, [], spec.image):
                continue  # room enough already: PendingJobs places it
            allowed = candidates
            if job.project_id in own_only:
                allowed = [c for c in candidates if c.project_id == job.project_id]
            chosen = plan_preemption(needs, hosts, allowed, priority=job.priority, image=spec.image)
            if chosen is None:
                continue
            plans[job.id] = {c.job_id for c in chosen}
            job.reason = (
                f"preempting job{'s' if len(chosen) > 1 else ''} "
                f"{', '.join(str(c.job_id) for c in chosen)} (lower priority) for its room"
            )
            for victim in chosen:
                self.interrupter.preempt(victim.job_id, job.id)
            return


def candidate(job: Job) -> Candidate:
    live = [t for t in job.tasks if t.status in LIVE_TASK_STATUSES and t.host_id is not None]
    return Candidate(
        job_id=job.id,
        priority=job.priority,
        project_id=job.project_id,
        places=tuple(
            HeldPlace(t.host_id, tuple(t.gpu_indices or ()), t.port)
            for t in live
            if t.host_id is not None
        ),
        loses_work=job.strategy == Strategy.multi_worker_mirrored,
    )
