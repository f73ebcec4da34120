"""Places queued jobs: every task of a job on a host with room, or none of them (gang)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from agents.vocabulary import Role
from backend.db import utcnow
from backend.jobs.models import Job, Task
from backend.jobs.states import LIVE_TASK_STATUSES, JobStatus, TaskStatus
from backend.jobs.tfconfig import cluster_spec, tf_config
from backend.scheduling.cluster import ClusterView
from backend.scheduling.executors import PassHosts
from backend.scheduling.lifecycle import transition_job
from backend.scheduling.native import RESEND_SECONDS
from backend.scheduling.placement import HostCapacity, Ranking, TaskNeed, Unplaceable, place
from backend.scheduling.quotas import GpuQuotas
from backend.scheduling.transaction import Transaction

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
        agents = tx.agents
        if view.capacity is None or view.capacity_key[0] != agents.changes or not fresh:
            view.capacity = await agents.capacities(tx.session)
            view.capacity_key = (agents.changes, time.monotonic())
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
        situation = (tx.agents.changes, view.running.changes, await session.scalar(live))
        same = situation == view.unplaced and time.monotonic() - view.unplaced_at < RESEND_SECONDS
        passed_over = view.passed_over if same else set()
        queue = [job_id for job_id in queue if job_id not in passed_over]
        if not queue:
            return
        capacity = await self.known_capacity(tx)
        # The hosts any job may use (not started for a job's own allocation), once per pass
        # rather than once per job: a thousand look-ups for each job placed.
        hosts = PassHosts.of(capacity, tx.agents)
        ranking = Ranking(hosts.unbound)
        quotas = await GpuQuotas.load(session, uncounted=tx.executors.uncounted_jobs())
        placed = 0
        async for job in _pending_jobs(session, queue):
            if placed == PLACEMENTS_PER_PASS:
                self.wake()  # the rest in the next pass, after this one has committed
                break
            if await self._place(tx, job, hosts, ranking, quotas):
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
        hosts: PassHosts,
        ranking: Ranking,
        quotas: GpuQuotas,
    ) -> bool:
        """Place every waiting task of the job, or none; says why not in the job's reason."""
        view = self.view
        if any(view.old_attempt_running(job.id, t.name, t.attempt) for t in job.tasks):
            job.reason = "waiting for the tasks of its previous attempt to stop"
            return False
        by = view.preempted_for(job.id)
        if by is not None:
            job.reason = f"preempted for job {by}: waiting until it is placed"
            return False
        victims = sorted(view.preempting.get(job.id, ()))
        if any(view.job_runs(victim) for victim in victims):
            job.reason = (
                f"waiting for the jobs it preempted ({', '.join(map(str, victims))}) to stop"
            )
            return False
        spec = job.job_spec
        # Its executor says where it may go: a job with an allocation of its own waits for
        # all of it, its reason the executor's to give (backend.slurm for Slurm's).
        executor = tx.executors.for_job(spec)
        usable = executor.hosts_for(job.id, spec, hosts)
        if usable is None:
            return False
        # Its pending tasks: all of them, or those moved off a host (a stopped evaluator stays
        # stopped).
        waiting = [t for t in job.tasks if t.status is TaskStatus.pending]
        needs = [TaskNeed(t.role, t.index, spec.replicas.of(t.role).gpus) for t in waiting]
        # Project quotas hold the jobs of executors without limits of their own.
        gpus = sum(need.gpus for need in needs) if executor.counts_gpus else 0
        refused = quotas.refusal(job.project_id, gpus)
        if refused is not None:
            job.reason = refused
            return False  # passed over like a job that does not fit
        # Jobs that do not fit are passed over, so smaller ones behind them can run.
        slots = place(
            needs, usable, image=spec.image, ranking=ranking if usable is hosts.unbound else None
        )
        if isinstance(slots, Unplaceable):
            job.reason = slots.reason
            view.preempting.pop(job.id, None)  # its room went elsewhere: plan again
            return False
        # Tasks that stay where they run (the ps of a job whose workers moved) keep their
        # addresses: the cluster is the whole job's.
        addresses = {key: address for key, address in staying_addresses(job)}
        addresses.update({key: f"{slot.address}:{slot.port}" for key, slot in slots.items()})
        cluster = cluster_spec(addresses)
        for task in waiting:
            slot = slots[(task.role, task.index)]
            task.host_id, task.port, task.gpu_indices = slot.host_id, slot.port, list(slot.gpus)
            task.tf_config = tf_config(addresses, task.role, task.index, cluster=cluster)
            task.status, task.pid, task.exit_code = TaskStatus.scheduled, None, None
            task.started_at = task.finished_at = None
            tx.start(slot.host_name, job, task, force=True)
        quotas.take(job.project_id, gpus)
        names = sorted({slot.host_name for slot in slots.values()})
        if job.restart_count == 0 and job.started_at is None:  # its first placement
            waited = max(0.0, (utcnow() - job.created_at).total_seconds())
            tx.observe(lambda metrics: metrics.placement_seconds.observe(waited))
        await transition_job(
            session=tx.session,
            job=job,
            to=JobStatus.scheduled,
            reason=f"placed on {', '.join(names)}",
            flush=False,
        )
        return True


def staying_addresses(job: Job) -> list[tuple[tuple[str, int], str]]:
    """The live training tasks of a job being placed in part, with their addresses (from
    the TF_CONFIG they were started with)."""
    found: list[tuple[tuple[str, int], str]] = []
    for task in job.tasks:
        if task.status not in LIVE_TASK_STATUSES or task.role == Role.evaluator:
            continue
        cluster = (task.tf_config or {}).get("cluster", {})
        found.append(((task.role, task.index), cluster[task.role][task.index]))
    return found


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
