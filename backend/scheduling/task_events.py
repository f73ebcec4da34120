"""Applying what agents report about tasks (started, exited) to tasks and their jobs.

Service functions: keyword-only, they take the change's Transaction, flush through the
lifecycle helpers and never commit.
Every one is safe to apply twice: a report about an attempt that is not live any more, or
not on the reporting host, changes nothing.
"""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agents.protocol import TaskExit, TaskKey
from agents.vocabulary import TaskName, format_task_name
from backend import security
from backend.db import utcnow
from backend.errors import NotFound
from backend.hosts.models import Host
from backend.jobs.events import EventKind, record_event
from backend.jobs.models import Job, JobEvent, Task
from backend.jobs.states import ACTIVE_JOB_STATUSES, LIVE_TASK_STATUSES, JobStatus, TaskStatus
from backend.scheduling import restarts
from backend.scheduling.lifecycle import transition_job
from backend.scheduling.outcome import judge_exit
from backend.scheduling.transaction import Transaction

# A task's name and attempt number: which run of it an interruption was decided for.
TaskAttempt = tuple[str, int]


async def find_task(*, session: AsyncSession, key: TaskKey) -> Task | None:
    name = TaskName.parse(key.task)
    return await session.scalar(
        select(Task).where(
            Task.job_id == key.job_id, Task.role == name.role, Task.index == name.index
        )
    )


def key_text(key: TaskKey) -> str:
    return f"{key.task} of job {key.job_id} (attempt {key.attempt})"


async def attempt_ran_on(*, session: AsyncSession, host: Host, key: TaskKey) -> bool:
    """Whether this host runs or ran this attempt: the current attempt must be placed there,
    an earlier one must have been started there (its task_status event names the host)."""
    task = await find_task(session=session, key=key)
    if task is None or key.attempt > task.attempt:
        return False
    if key.attempt == task.attempt:
        return task.host_id == host.id
    started = await session.scalars(
        select(JobEvent).where(
            JobEvent.job_id == key.job_id,
            JobEvent.task == key.task,
            JobEvent.kind == EventKind.task_status,
        )
    )
    return any(
        event.data.get("to") == "running"
        and event.data.get("attempt") == key.attempt
        and event.data.get("host") == host.name
        for event in started
    )


class PlacedTask(Protocol):
    """What `wanted_on` reads of a task: a Task, or a row of one."""

    @property
    def status(self) -> TaskStatus: ...
    @property
    def host_id(self) -> int | None: ...
    @property
    def attempt(self) -> int: ...


class ItsJob(Protocol):
    @property
    def status(self) -> JobStatus: ...


class NamedHost(Protocol):
    """What a task's start or exit needs of its host: a Host, or a row of its id and name."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...


def wanted_on(task: PlacedTask | None, job: ItsJob | None, host: NamedHost, key: TaskKey) -> bool:
    """Whether this attempt should be running on this host right now."""
    return (
        task is not None
        and job is not None
        and job.status in ACTIVE_JOB_STATUSES
        and task.status in LIVE_TASK_STATUSES
        and task.host_id == host.id
        and task.attempt == key.attempt
    )


async def end_job(
    *,
    tx: Transaction,
    job: Job,
    status: JobStatus,
    reason: str,
    data: dict[str, object] | None = None,
) -> None:
    """Finish a job and stop whatever of it still runs."""
    await transition_job(session=tx.session, job=job, to=status, reason=reason, data=data)
    for task in await tx.session.scalars(select(Task).where(Task.job_id == job.id)):
        if task.status is TaskStatus.pending:
            task.status = TaskStatus.stopped
        elif task.status in LIVE_TASK_STATUSES and task.host is not None:
            tx.stop(task.host.name, task.key, reason)


async def request_cancel(tx: Transaction, *, job_id: int) -> None:
    """Cancel a job by request: it ends at once and whatever of it runs is told to stop."""
    job = await tx.session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    await end_job(tx=tx, job=job, status=JobStatus.cancelled, reason="cancelled by request")


async def apply_exit(
    *, tx: Transaction, host: Host, exit: TaskExit, vanished: bool = False
) -> None:
    """Apply an attempt's exit. `vanished`: no exit came, the agent just no longer runs it
    (it was restarted): an infrastructure failure, retried as a lost host's tasks are."""
    session = tx.session
    task = await find_task(session=session, key=exit.key)
    if task is None or (task.attempt == exit.key.attempt and task.host_id != host.id):
        security.refused(f"agent {host.name}", f"task_exited for {key_text(exit.key)}")
        return
    if exit.agent_stopping:
        tx.agents.leaving(host.name)  # a stopping agent takes no new tasks
    if task.attempt != exit.key.attempt or task.host_id != host.id:
        return  # an exit of an attempt we no longer track
    if task.status not in LIVE_TASK_STATUSES:
        return  # already applied (the agent resent it after a reconnect)
    job = await session.get_one(Job, task.job_id)
    siblings = [
        (t.role, t.status)
        for t in await session.scalars(select(Task).where(Task.job_id == job.id))
        if t.id != task.id
    ]
    outcome = judge_exit(
        strategy=job.strategy,
        role=task.role,
        task=task.name,
        exit_code=exit.exit_code,
        signal=exit.signal,
        error=exit.error,
        job_status=job.status,
        sibling_statuses=siblings,
        over_memory_limit=exit.over_memory_limit,
    )
    if vanished:
        outcome = replace(outcome, reason=f"{task.name} is gone: {host.name} no longer runs it")
    task.status, task.exit_code, task.finished_at = outcome.task_status, exit.exit_code, utcnow()
    details: dict[str, object] = {
        "to": outcome.task_status.value,
        "attempt": task.attempt,
        "exit_code": exit.exit_code,
        "signal": exit.signal,
        "refused": exit.refused,
        "over_memory_limit": exit.over_memory_limit,
        "cpu_seconds": exit.cpu_seconds,
        "memory_peak_bytes": exit.memory_peak_bytes,
        "log_tail": exit.log_tail,
    }
    await record_event(
        session=session,
        job=job,
        kind=EventKind.task_status,
        task=task.name,
        message=outcome.reason,
        data=details,
    )
    if outcome.task_status is TaskStatus.failed:
        cause = infrastructure_cause(exit, vanished)
        if cause is not None:
            evidence = {"job_id": job.id, "task": task.name, "attempt": task.attempt}
            tx.infrastructure_failure(host.name, {**evidence, "cause": cause})
    if outcome.job_status is None:
        return
    reason = outcome.reason
    if outcome.job_status is JobStatus.failed and exit.refused is not None:
        # The task stopped itself for good: restarting it would only fail the same way.
        reason = f"{task.name} stopped for good: {exit.refused}"
    elif outcome.job_status is JobStatus.failed and allocation_ending(tx, host, job, exit):
        await restarts.after_allocation_ended(
            tx=tx, job=job, reason=f"the agent on {host.name} is stopping with its allocation"
        )
        return
    elif outcome.job_status is JobStatus.failed and exit.interrupted is not None:
        await restarts.after_stop_signal(tx=tx, job=job, task=task, note=exit.interrupted)
        return
    elif outcome.job_status is JobStatus.failed:
        decision = await restarts.after_failure(
            tx=tx,
            job=job,
            failed=task,
            reason=outcome.reason,
            exit_code=exit.exit_code,
            error=exit.error,
            over_memory_limit=exit.over_memory_limit,
            infrastructure=vanished,
        )
        if decision.restarted:
            return
        reason = decision.reason
    await end_job(
        tx=tx,
        job=job,
        status=outcome.job_status,
        reason=reason,
        data=details,
    )


# Signals that say more about the host than the program: the kernel's OOM killer (or a person)
# when not the task's own memory limit, and a bus error (a memory or storage fault). Others
# (SIGSEGV, SIGABRT) are most often the program's own doing.
HOST_SIGNALS = {int(signal.SIGKILL): "SIGKILL", int(signal.SIGBUS): "SIGBUS"}


def infrastructure_cause(exit: TaskExit, vanished: bool) -> str | None:
    """Why a failed attempt's end counts against its host, if it does: it vanished with its
    agent, or a signal neither Strata nor the task's own memory limit sent killed it. An
    agent's own stop, an interruption, a refusal or a failed start does not count."""
    if vanished:
        return "vanished with its agent"
    if exit.agent_stopping or exit.interrupted or exit.refused or exit.error is not None:
        return None
    if exit.over_memory_limit is not None:
        return None
    number = exit.signal
    if number is None and exit.exit_code is not None and exit.exit_code > 128:
        number = exit.exit_code - 128  # a container's main process, as its engine says
    name = None if number is None else HOST_SIGNALS.get(number)
    return None if name is None else f"killed by {name}"


def allocation_ending(tx: Transaction, host: Host, job: Job, exit: TaskExit) -> bool:
    """Whether the exit is the job's own allocation going away (Slurm stopping the agents it
    started for the job: a requeue, a preemption, the Slurm job's end) rather than a failure.
    A native agent's stop still counts: its host is lost to the job as a failed one is."""
    return exit.agent_stopping and tx.agents.bound_job(host.name) == job.id


async def jobs_on(session: AsyncSession, host_name: str) -> dict[int, frozenset[TaskAttempt]]:
    """The unfinished jobs with live tasks on that host, each with those attempts."""
    rows = await session.execute(
        select(Task.job_id, Task.role, Task.index, Task.attempt)
        .join(Host, Task.host_id == Host.id)
        .join(Job, Task.job_id == Job.id)
        .where(
            Host.name == host_name,
            Task.status.in_(LIVE_TASK_STATUSES),
            Job.status.in_(ACTIVE_JOB_STATUSES),
        )
    )
    found: dict[int, set[TaskAttempt]] = {}
    for job_id, role, index, attempt in rows:
        found.setdefault(job_id, set()).add((format_task_name(role, index), attempt))
    return {job_id: frozenset(found[job_id]) for job_id in sorted(found)}


async def mark_host_lost(*, tx: Transaction, host: Host, reason: str) -> None:
    """Its tasks cannot keep their addresses: mark them lost; re-place or end their jobs."""
    session = tx.session
    live = list(
        await session.scalars(
            select(Task).where(Task.host_id == host.id, Task.status.in_(LIVE_TASK_STATUSES))
        )
    )
    if live:  # once per loss, however many tasks it took
        tx.infrastructure_failure(host.name, {"cause": "host lost", "tasks": len(live)})
    for task in live:
        if task.status not in LIVE_TASK_STATUSES:
            continue  # already re-placed with a sibling that was on this host too
        job = await session.get_one(Job, task.job_id)
        task.status, task.finished_at = TaskStatus.lost, utcnow()
        await record_event(
            session=session,
            job=job,
            kind=EventKind.task_status,
            task=task.name,
            message=f"{task.name} lost with host {host.name}",
            data={"to": "lost", "attempt": task.attempt},
        )
        if job.status in ACTIVE_JOB_STATUSES:
            decision = await restarts.after_host_lost(tx=tx, job=job, reason=reason)
            if not decision.restarted:
                await end_job(
                    tx=tx,
                    job=job,
                    status=JobStatus.failed,
                    reason=decision.reason,
                )
