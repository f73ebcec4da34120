"""Places queued jobs: every task of a job on a host with room, or none of them (gang)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from backend.db import utcnow
from backend.jobs.lifecycle import transition_job
from backend.jobs.models import Job, Task
from backend.jobs.states import LIVE_TASK_STATUSES, JobStatus, TaskStatus
from backend.jobs.tfconfig import cluster_spec, tf_config
from backend.scheduling.cluster import ClusterView
from backend.scheduling.native import RESEND_SECONDS
from backend.scheduling.placement import HostCapacity, Ranking, TaskNeed, Unplaceable, place
from backend.scheduling.quotas import GpuQuotas
from backend.scheduling.transaction import Transaction
from backend.slurm.script import allocation_shape

# Jobs placed in one pass, which is one transaction: bounded so that SQLite's write lock is
# not held longer than a submission waits for it; not so small that a backlog needs many
# passes, each with its fixed queries.
PLACEMENTS_PER_PASS = 100
PENDING_PAGE = 2 * PLACEMENTS_PER_PASS  # queued jobs loaded at a time while placing


class PendingJobs:
    def __init__(self, *, view: ClusterView, wake: Callable[[], None]) -> None:
        self.view = view
        self.wake = wake  # asks for another pass (more jobs than one pass places)

    async def known_capacity(self, tx: Transaction) -> list[HostCapacity]:
        view = self.view
        fresh = time.monotonic() - view.capacity_key[1] < RESEND_SECONDS
        if view.capacity is None or view.capacity_key[0] != tx.backend.changes or not fresh:
            view.capacity = await tx.backend.capacities(tx.session)
            view.capacity_key = (tx.backend.changes, time.monotonic())
        return view.capacity

    async def reconcile(self, tx: Transaction) -> None:
        view, session = self.view, tx.session
        queue = list(
            await session.scalars(
                select(Job.id)
                .where(Job.status == JobStatus.pending)
                .order_by(Job.priority.desc(), Job.id)
            )
        )
        if not queue:
            return
        # Jobs that found no room wait for something to change: the agents connected, what
        # they run, the live tasks. Examining each again means checking every host's capacity,
        # and a pass runs for every submission: a job submitted to a full
        # cluster is examined alone. All are still looked at again every few seconds.
        live = select(func.count()).select_from(Task).where(Task.status.in_(LIVE_TASK_STATUSES))
        situation = (tx.backend.changes, view.running.changes, await session.scalar(live))
        same = situation == view.unplaced and time.monotonic() - view.unplaced_at < RESEND_SECONDS
        passed_over = view.passed_over if same else set()
        queue = [job_id for job_id in queue if job_id not in passed_over]
        if not queue:
            return
        capacity = await self.known_capacity(tx)
        # The hosts any job may use (not started for a Slurm job's allocation), once per pass
        # rather than once per job: a thousand look-ups for each job placed.
        unbound = [c for c in capacity if tx.backend.bound_job(c.name) is None]
        ranking = Ranking(unbound)
        quotas = await GpuQuotas.load(session)
        placed = 0
        async for job in _pending_jobs(session, queue):
            if placed == PLACEMENTS_PER_PASS:
                self.wake()  # the rest in the next pass, after this one has committed
                break
            if await self._place(tx, job, capacity, unbound, ranking, quotas):
                placed += 1
            else:
                passed_over.add(job.id)
        # The pass's placements written together (not a flush per job).
        await session.flush()
        if placed:
            view.unplaced = None
        elif not same:
            view.unplaced, view.unplaced_at, view.passed_over = (
                situation,
                time.monotonic(),
                passed_over,
            )

    async def _place(
        self,
        tx: Transaction,
        job: Job,
        capacity: list[HostCapacity],
        unbound: list[HostCapacity],
        ranking: Ranking,
        quotas: GpuQuotas,
    ) -> bool:
        """Place every waiting task of the job, or none; says why not in the job's reason."""
        if any(self.view.old_attempt_running(job.id, t.name, t.attempt) for t in job.tasks):
            job.reason = "waiting for the tasks of its previous attempt to stop"
            return False
        spec = job.job_spec
        # A Slurm job goes on the agents started in its allocation, once all have joined
        # (until then it shows Slurm's reason, backend.slurm); other jobs never go there.
        usable = (
            unbound
            if spec.slurm is None
            else [c for c in capacity if tx.backend.bound_job(c.name) == job.id]
        )
        if spec.slurm is not None and len(usable) < allocation_shape(spec).nodes:
            return False
        # Every training task is pending here; a stopped evaluator stays stopped.
        waiting = [t for t in job.tasks if t.status is TaskStatus.pending]
        needs = [TaskNeed(t.role, t.index, spec.replicas.of(t.role).gpus) for t in waiting]
        # Project quotas hold native jobs only: Slurm applies its own to the project's account.
        gpus = sum(need.gpus for need in needs) if spec.slurm is None else 0
        refused = quotas.refusal(job.project_id, gpus)
        if refused is not None:
            job.reason = refused
            return False  # passed over like a job that does not fit
        # Jobs that do not fit are passed over, so smaller ones behind them can run.
        slots = place(
            needs, usable, image=spec.image, ranking=ranking if usable is unbound else None
        )
        if isinstance(slots, Unplaceable):
            job.reason = slots.reason
            return False
        addresses = {key: f"{slot.address}:{slot.port}" for key, slot in slots.items()}
        cluster = cluster_spec(addresses)
        for task in waiting:
            slot = slots[(task.role, task.index)]
            task.host_id, task.port, task.gpu_indices = slot.host_id, slot.port, list(slot.gpus)
            task.tf_config = tf_config(addresses, task.role, task.index, cluster=cluster)
            task.status, task.pid, task.exit_code = TaskStatus.scheduled, None, None
            task.started_at = task.finished_at = None
            tx.start(slot.host_name, job, task, force=True)
        quotas.take(job.project_id, gpus)
        hosts = sorted({slot.host_name for slot in slots.values()})
        if job.restart_count == 0 and job.started_at is None:  # its first placement
            waited = max(0.0, (utcnow() - job.created_at).total_seconds())
            tx.observe(lambda metrics: metrics.placement_seconds.observe(waited))
        await transition_job(
            session=tx.session,
            job=job,
            to=JobStatus.scheduled,
            reason=f"placed on {', '.join(hosts)}",
            flush=False,
        )
        return True


async def _pending_jobs(session: AsyncSession, queue: list[int]) -> AsyncIterator[Job]:
    """The queued jobs with their tasks, in queue order, loaded a page at a time: a pass
    places a bounded number, so loading every queued job's tasks each pass would be waste."""
    for first in range(0, len(queue), PENDING_PAGE):
        page = queue[first : first + PENDING_PAGE]
        loaded = {
            job.id: job
            for job in await session.scalars(
                # Still pending: a writer outside the controller's lock may have ended it.
                select(Job)
                .where(Job.id.in_(page), Job.status == JobStatus.pending)
                .options(selectinload(Job.tasks))
            )
        }
        for job_id in page:
            if job_id in loaded:
                yield loaded[job_id]
