"""Interrupting a job on purpose: a checkpoint at the writer's next step boundary (training
then holds), the job's tasks stop, and it waits to be placed again, resuming from that
checkpoint. Without a checkpoint by the deadline it stops anyway, to resume from its last
backup, and says so. An interruption is not a failure: it spends no restart budget, sets no
backoff and counts in no `restart_count`.

The checkpoint is waited for outside the controller's lock (`take_checkpoint`; for what a
pass decides, `Interrupter`); the change of status is one transaction under it (`suspend`,
`resume`, `preempt`)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agents.vocabulary import Role, Strategy
from backend.checkpoints.service import checkpoint_writer, get_checkpoint
from backend.errors import Conflict, NotFound
from backend.hosts.models import Host
from backend.jobs import queries
from backend.jobs.actions import suspend_refusal
from backend.jobs.models import Job, JobClient, Task
from backend.jobs.states import LIVE_TASK_STATUSES, PLACED_JOB_STATUSES, JobStatus
from backend.scheduling.lifecycle import transition_job
from backend.scheduling.restarts import unplace_task, unplace_tasks
from backend.scheduling.runtime_links import RuntimeLinks
from backend.scheduling.task_events import TaskAttempt
from backend.scheduling.transaction import Transaction
from backend.streams.models import MetricPoint

log = logging.getLogger("strata.scheduling")

DEFAULT_DEADLINE_SECONDS = 60.0
# The writer holds its training this long past the deadline: time for the server to stop it.
HOLD_MARGIN_SECONDS = 30.0


@dataclass(frozen=True)
class ResumePoint:
    """What an interrupted job resumes from: the checkpoint taken for the interruption (by
    that attempt of that task), or why none was (it then resumes from its last backup)."""

    writer: str | None = None
    attempt: int | None = None
    checkpoint: str | None = None
    step: int | None = None
    missing: str | None = None
    # multi_worker_mirrored: its workers, stopped with SIGTERM, back up together at their
    # next step (TensorFlow's save before preemption, agents/runtime/backup.py).
    on_stop: bool = False

    def describe(self) -> str:
        if self.checkpoint is not None:
            return f"checkpoint {self.checkpoint} at step {self.step}"
        if self.on_stop:
            return "the backup its workers write together as they stop"
        return f"no checkpoint ({self.missing}); it resumes from its last backup"

    def data(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "step": self.step,
            "missing": self.missing,
            "on_stop": self.on_stop,
        }


async def take_checkpoint(
    *, session: AsyncSession, links: RuntimeLinks, job_id: int, deadline: float
) -> ResumePoint:
    """Asks the job's checkpoint writer for the interruption's checkpoint and waits at most
    `deadline` seconds for it. Holds no database connection while it waits."""
    job = await queries.get_job(session=session, job_id=job_id)
    if job.strategy == Strategy.multi_worker_mirrored and job.status is JobStatus.running:
        await session.commit()
        return ResumePoint(on_stop=True)
    try:
        writer = checkpoint_writer(job, await session.get(JobClient, job_id))
    except Conflict as no_writer:
        return ResumePoint(missing=str(no_writer))
    finally:
        await session.commit()
    name, attempt = writer
    link = links.find(job_id, name, attempt)
    if link is None:
        return ResumePoint(name, attempt, missing=f"the runtime of {name} is not connected")
    try:
        command_id, answer = await links.send_command(
            link, "interrupt", hold_seconds=deadline + HOLD_MARGIN_SECONDS
        )
    except Exception as exc:  # the runtime's socket closed under us
        return ResumePoint(name, attempt, missing=f"{name} could not be asked: {exc!r}")
    try:
        async with asyncio.timeout(deadline):
            outcome = await answer
    except TimeoutError:
        return ResumePoint(name, attempt, missing=f"{name} wrote none within {deadline:g}s")
    finally:
        links.forget(command_id)
    if outcome.failure is not None or outcome.checkpoint_id is None:
        return ResumePoint(name, attempt, missing=f"{name} could not write it: {outcome.failure}")
    row = await get_checkpoint(session=session, checkpoint_id=outcome.checkpoint_id)
    await session.commit()
    return ResumePoint(name, attempt, PurePath(row.path).name, row.step)


async def steps_lost(session: AsyncSession, job_id: int, point: ResumePoint) -> int | None:
    """Steps the writer reported past the interruption's checkpoint (None without one)."""
    if point.checkpoint is None or point.step is None:
        return None
    reported = await session.scalar(
        select(func.max(MetricPoint.step)).where(
            MetricPoint.job_id == job_id,
            MetricPoint.task == point.writer,
            MetricPoint.attempt == point.attempt,
        )
    )
    return max(0, (reported or 0) - point.step)


def _lost_words(lost: int | None) -> str:
    return "" if lost is None else f" ({lost} step{'' if lost == 1 else 's'} lost)"


async def _interruptible_job(tx: Transaction, job_id: int) -> Job:
    job = await tx.session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    refusal = suspend_refusal(job.status, job.job_spec)
    if refusal is not None:
        raise Conflict(f"job {job_id} cannot be suspended: {refusal}")
    return job


async def suspend(tx: Transaction, *, job_id: int, point: ResumePoint) -> None:
    """Stop the job's tasks and keep it off the cluster until resumed (no quota counts it:
    it holds no host)."""
    job = await _interruptible_job(tx, job_id)
    lost = await steps_lost(tx.session, job_id, point)
    reason = f"suspended by request; resumes from {point.describe()}{_lost_words(lost)}"
    await transition_job(
        session=tx.session,
        job=job,
        to=JobStatus.suspended,
        reason=reason,
        data={"interruption": "suspend", **point.data(), "steps_lost": lost},
    )
    await unplace_tasks(tx=tx, job=job, reason=reason, failure=False)
    tx.observe(lambda metrics: metrics.interruptions.labels(cause="suspend").inc())


async def resume(tx: Transaction, *, job_id: int) -> None:
    """A suspended job waits for room again, to continue from where it was suspended."""
    job = await tx.session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    if job.status is not JobStatus.suspended:
        raise Conflict(f"job {job_id} is {job.status.value}; only a suspended job can be resumed")
    await transition_job(
        session=tx.session, job=job, to=JobStatus.pending, reason="resumed by request"
    )


async def preempt(tx: Transaction, *, job_id: int, by_id: int, point: ResumePoint) -> bool:
    """Send a running job back to the queue for a pending job of higher priority. False, with
    nothing changed, when either has moved on meanwhile (ended, placed, cancelled)."""
    job = await tx.session.get(Job, job_id)
    by = await tx.session.get(Job, by_id)
    if job is None or by is None or job.status is not JobStatus.running:
        return False
    if by.status is not JobStatus.pending:
        return False
    lost = await steps_lost(tx.session, job_id, point)
    reason = (
        f"preempted by job {by.id} ({by.name}, priority {by.priority}); resumes from "
        f"{point.describe()}{_lost_words(lost)}"
    )
    await transition_job(
        session=tx.session,
        job=job,
        to=JobStatus.pending,
        reason=reason,
        data={"interruption": "preemption", "by": by.id, **point.data(), "steps_lost": lost},
    )
    await unplace_tasks(tx=tx, job=job, reason=reason, failure=False)
    tx.observe(lambda metrics: metrics.interruptions.labels(cause="preemption").inc())
    return True


def tasks_to_move(
    strategy: str, coordinator: str, on_host: list[Task], tasks: list[Task]
) -> list[Task]:
    """Which of a job's tasks move when a host they run on goes: under parameter_server,
    when only workers (or the evaluator) are there, those and the chief, which TensorFlow
    connects to its workers once, at start (the ps keep serving); else all of them."""
    roles = {task.role for task in on_host}
    if roles <= {Role.evaluator}:
        return on_host
    workers_only = roles <= {Role.worker, Role.evaluator}
    if strategy == Strategy.parameter_server and coordinator == "chief" and workers_only:
        chief = [t for t in tasks if t.role == Role.chief and t not in on_host]
        return [*on_host, *chief]
    return [t for t in tasks if t.role != Role.evaluator or t.status in LIVE_TASK_STATUSES]


async def vacate(
    tx: Transaction,
    *,
    job_id: int,
    host: str,
    attempts: frozenset[TaskAttempt],
    point: ResumePoint,
    why: str,
    cause: str,
) -> bool:
    """Move a job's tasks off a host that goes (drained, or its agent leaving): they and
    what TensorFlow needs restarted with them (`tasks_to_move`) wait for new places, the job
    pending meanwhile. Only `attempts` (those live there when it was decided) count: False,
    with nothing changed, when none of them is live there any more (they ended first, or the
    job has moved on meanwhile and was placed again, even on a host of the same name)."""
    job = await tx.session.get(Job, job_id)
    if job is None or job.status not in PLACED_JOB_STATUSES:
        return False
    tasks = list(await tx.session.scalars(select(Task).where(Task.job_id == job_id)))
    host_id = await tx.session.scalar(select(Host.id).where(Host.name == host))
    on_host = [
        t
        for t in tasks
        if t.host_id == host_id
        and t.status in LIVE_TASK_STATUSES
        and (t.name, t.attempt) in attempts
    ]
    if not on_host:
        return False
    lost = await steps_lost(tx.session, job_id, point)
    reason = f"{why}; resumes from {point.describe()}{_lost_words(lost)}"
    moving = tasks_to_move(job.strategy, job.job_spec.coordinator, on_host, tasks)
    await transition_job(
        session=tx.session,
        job=job,
        to=JobStatus.pending,
        reason=reason,
        data={
            "interruption": cause,
            "host": host,
            "moved": sorted(t.name for t in moving),
            **point.data(),
            "steps_lost": lost,
        },
    )
    for task in moving:
        unplace_task(tx=tx, task=task, reason=reason, failure=False)
    tx.observe(lambda metrics: metrics.interruptions.labels(cause=cause).inc())
    return True


Apply = Callable[[Callable[[Transaction], Awaitable[bool]]], Awaitable[bool]]
# An interruption's change once its checkpoint is known: preempt or vacate, less job and point.
Interruption = Callable[..., Awaitable[bool]]


class Interrupter:
    """Carries out the interruptions a pass decides: a pass holds the controller's lock and
    cannot wait for a checkpoint, so each runs here, then applies its change (`apply`: the
    controller's). A server restart loses those in flight; the next passes decide again."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        links: RuntimeLinks,
        apply: Apply,
        deadline: float,
    ) -> None:
        self.sessions = sessions
        self.links = links
        self.apply = apply
        self.deadline = deadline
        self.in_flight: dict[int, asyncio.Task[None]] = {}  # by the interrupted job's id

    def preempt(self, job_id: int, by_id: int) -> None:
        """Interrupt the job for a pending one of higher priority."""
        self._interrupt(job_id, functools.partial(preempt, by_id=by_id), self.deadline)

    def vacate(
        self,
        job_id: int,
        host: str,
        attempts: frozenset[TaskAttempt],
        deadline: float,
        *,
        why: str,
        cause: str,
    ) -> None:
        """Move the job's `attempts` off a host that goes (within `deadline`)."""
        change = functools.partial(vacate, host=host, attempts=attempts, why=why, cause=cause)
        self._interrupt(job_id, change, deadline)

    def _interrupt(self, job_id: int, change: Interruption, deadline: float) -> None:
        if job_id in self.in_flight:
            return
        task = asyncio.get_running_loop().create_task(
            self._run(job_id, change, deadline), name=f"interrupt job {job_id}"
        )
        self.in_flight[job_id] = task
        task.add_done_callback(lambda _: self.in_flight.pop(job_id, None))

    async def _run(self, job_id: int, change: Interruption, deadline: float) -> None:
        try:
            async with self.sessions() as session:
                point = await take_checkpoint(
                    session=session, links=self.links, job_id=job_id, deadline=deadline
                )
            await self.apply(functools.partial(change, job_id=job_id, point=point))
        except Exception:
            log.exception("interrupting job %d failed", job_id)

    async def close(self) -> None:
        for task in list(self.in_flight.values()):
            task.cancel()
        await asyncio.gather(*self.in_flight.values(), return_exceptions=True)
