"""Restarting tasks and jobs: by policy after a failure, by request, or after a lost host.

Service functions: keyword-only, they take the change's Transaction, flush through the
lifecycle helpers and never commit.
A restarted task keeps its host, port, GPUs and TF_CONFIG and gets the next attempt number;
the controller starts it once its backoff has passed and the agent no longer runs the old
attempt (the port must be free). A re-placed job goes back to pending with every task's
placement cleared, and is placed again once all of its old attempts have stopped.
Every restart adds to the restart counts and attempts; only those after a failure add to the
failure counts, which the policy's max_restarts and backoff read: a user's restarts (and a
Slurm requeue's) leave the job its whole budget for real failures.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select

from agents.vocabulary import Role
from backend.db import utcnow
from backend.errors import Conflict, NotFound
from backend.jobs.actions import RESTARTABLE, TASK_RESTARTABLE
from backend.jobs.events import EventKind, record_event
from backend.jobs.models import Job, Task
from backend.jobs.states import LIVE_TASK_STATUSES, PLACED_JOB_STATUSES, JobStatus, TaskStatus
from backend.scheduling.lifecycle import transition_job
from backend.scheduling.restart_rules import backoff_seconds, plan_restart, retryable
from backend.scheduling.transaction import Transaction


@dataclass(frozen=True)
class Decision:
    restarted: bool
    reason: str  # why the job ends, when it was not restarted


async def after_failure(
    *,
    tx: Transaction,
    job: Job,
    failed: Task,
    reason: str,
    exit_code: int | None,
    error: str | None,
    over_memory_limit: int | None = None,
    infrastructure: bool = False,  # the attempt vanished with its agent's restart
) -> Decision:
    """Restart what the role rules say if the spec's policy allows it and restarts remain."""
    session = tx.session
    spec = job.job_spec
    policy = spec.restart
    if not retryable(
        policy=policy.policy,
        exit_code=exit_code,
        error=error,
        host_lost=infrastructure,
        over_own_memory_limit=over_memory_limit is not None,
    ):
        return Decision(False, reason)
    tasks = list(await session.scalars(select(Task).where(Task.job_id == job.id)))
    plan = plan_restart(job.strategy, failed.name, [t.name for t in tasks])
    if plan.job_level:
        if job.failure_count >= policy.max_restarts:
            return Decision(False, f"{reason}; gave up after {job.failure_count} restarts")
        delay = backoff_seconds(policy.backoff_seconds, job.failure_count)
        job.restart_count += 1
        job.failure_count += 1
        await transition_job(
            session=session,
            job=job,
            to=JobStatus.restarting,
            reason=f"{reason}; restarting {', '.join(sorted(plan.tasks))} in {delay:g}s "
            f"(restart {job.failure_count} of {policy.max_restarts})",
        )
    else:
        if failed.failure_count >= policy.max_restarts:
            return Decision(
                False, f"{reason}; gave up after {failed.failure_count} restarts of {failed.name}"
            )
        delay = backoff_seconds(policy.backoff_seconds, failed.failure_count)
        await record_event(
            session=session,
            job=job,
            kind=EventKind.restart,
            task=failed.name,
            message=f"{reason}; restarting {failed.name} alone in {delay:g}s "
            f"(attempt {failed.attempt + 1}), the job goes on",
        )
    for task in tasks:
        if task.name in plan.tasks:
            restart_in_place(tx=tx, task=task, delay=delay, reason=reason, failure=True)
    cause = failure_cause(exit_code, error, over_memory_limit)
    tx.observe(lambda metrics: metrics.restarts.labels(cause=cause).inc())
    return Decision(True, reason)


def failure_cause(exit_code: int | None, error: str | None, over_memory_limit: int | None) -> str:
    """What /metrics counts a restart after a failure under (a short fixed word)."""
    if over_memory_limit is not None:
        return "over_memory_limit"
    if exit_code is None and error is not None:
        return "start_failed"
    if exit_code is None or exit_code < 0 or exit_code >= 128:
        return "task_killed"  # a signal (128+N in a shell or container), or it vanished
    return "task_failed"


def restart_in_place(
    *, tx: Transaction, task: Task, delay: float, reason: str, failure: bool
) -> None:
    """The next attempt of a task on the same host and port, once `delay` has passed.
    `failure`: it follows a failure, and so counts against the policy's budget."""
    if task.status in LIVE_TASK_STATUSES and task.host is not None:
        tx.stop(task.host.name, task.key, reason, force=True)
    task.attempt += 1
    task.failure_count += int(failure)
    task.status = TaskStatus.scheduled
    task.pid = task.exit_code = None
    task.started_at = task.finished_at = None
    task.restart_after = utcnow() + timedelta(seconds=delay)


async def replace_job(
    *, tx: Transaction, job: Job, reason: str, failure: bool, fresh_budget: bool = False
) -> None:
    """Send the whole job back to placement: new hosts, ports and TF_CONFIG for every task.
    `failure`: it follows a failure (a lost host), and so counts against the budget.
    `fresh_budget`: the failures so far are forgiven (a new run of a failed job)."""
    session = tx.session
    job.restart_count += 1
    job.failure_count = 0 if fresh_budget else job.failure_count + int(failure)
    if job.status is JobStatus.failed:
        await transition_job(session=session, job=job, to=JobStatus.restarting, reason=reason)
    await transition_job(session=session, job=job, to=JobStatus.pending, reason=reason)
    await unplace_tasks(tx=tx, job=job, reason=reason, failure=failure, fresh_budget=fresh_budget)


async def unplace_tasks(
    *, tx: Transaction, job: Job, reason: str, failure: bool, fresh_budget: bool = False
) -> None:
    """Stop whatever of the job runs and make every task a new attempt waiting for a place
    (a stopped sidecar evaluator stays stopped)."""
    for task in await tx.session.scalars(select(Task).where(Task.job_id == job.id)):
        if task.role == Role.evaluator and task.status not in LIVE_TASK_STATUSES:
            continue  # a stopped sidecar evaluator is started again only by request
        unplace_task(tx=tx, task=task, reason=reason, failure=failure, fresh_budget=fresh_budget)


def unplace_task(
    *, tx: Transaction, task: Task, reason: str, failure: bool, fresh_budget: bool = False
) -> None:
    """Stop the task if it runs; its next attempt waits for a place (any host, port, GPUs)."""
    if task.status in LIVE_TASK_STATUSES and task.host is not None:
        tx.stop(task.host.name, task.key, reason, force=True)
    task.attempt += 1
    task.failure_count = 0 if fresh_budget else task.failure_count + int(failure)
    task.status = TaskStatus.pending
    task.host_id = task.port = task.pid = task.exit_code = None
    task.gpu_indices, task.tf_config = [], None
    task.started_at = task.finished_at = task.restart_after = None


async def after_host_lost(*, tx: Transaction, job: Job, reason: str) -> Decision:
    """A lost host's tasks cannot keep their addresses: re-place the job if policy allows."""
    policy = job.job_spec.restart
    if not retryable(policy=policy.policy, exit_code=None, error=None, host_lost=True):
        return Decision(False, reason)
    if job.failure_count >= policy.max_restarts:
        return Decision(False, f"{reason}; gave up after {job.failure_count} restarts")
    await replace_job(
        tx=tx,
        job=job,
        reason=f"{reason}; re-placing the job (restart {job.failure_count + 1} of "
        f"{policy.max_restarts})",
        failure=True,
    )
    tx.observe(lambda metrics: metrics.restarts.labels(cause="host_lost").inc())
    return Decision(True, reason)


async def after_hang(*, tx: Transaction, job: Job, reason: str) -> Decision:
    """A hung job restarts every training task where it is, from its latest checkpoint: which
    task hangs is not known (a stalled collective stalls every peer), so no role rule can
    pick one. A failure: it spends the budget and sets the backoff; `never` ends the job."""
    policy = job.job_spec.restart
    if policy.policy == "never":
        return Decision(False, reason)
    if job.failure_count >= policy.max_restarts:
        return Decision(False, f"{reason}; gave up after {job.failure_count} restarts")
    tasks = [
        task
        for task in await tx.session.scalars(select(Task).where(Task.job_id == job.id))
        if task.role is not Role.evaluator and task.host_id is not None
    ]
    delay = backoff_seconds(policy.backoff_seconds, job.failure_count)
    job.restart_count += 1
    job.failure_count += 1
    await transition_job(
        session=tx.session,
        job=job,
        to=JobStatus.restarting,
        reason=f"{reason}; restarting {', '.join(sorted(t.name for t in tasks))} in {delay:g}s "
        f"(restart {job.failure_count} of {policy.max_restarts})",
    )
    for task in tasks:
        restart_in_place(tx=tx, task=task, delay=delay, reason=reason, failure=True)
    tx.observe(lambda metrics: metrics.restarts.labels(cause="hung").inc())
    return Decision(True, reason)


async def after_allocation_ended(*, tx: Transaction, job: Job, reason: str) -> None:
    """The agents of the job's Slurm allocation are stopping: a requeue (or the Slurm job's
    end, which the Slurm backend then ends the job for). The job waits for its allocation
    to come back and is placed there again: an interruption, neither a failure nor a
    restart, whose tasks resume from their backup."""
    if job.status is JobStatus.pending:
        return  # sent back already (by an exit from another of the allocation's agents)
    reason = f"{reason}; waiting for Slurm to run it again"
    await transition_job(session=tx.session, job=job, to=JobStatus.pending, reason=reason)
    await unplace_tasks(tx=tx, job=job, reason=reason, failure=False)
    tx.observe(lambda metrics: metrics.interruptions.labels(cause="allocation_ended").inc())


async def after_stop_signal(*, tx: Transaction, job: Job, task: Task, note: str) -> None:
    """The task saved on a stop signal and exited (under multi_worker_mirrored a SIGTERM to
    any worker, from anywhere, makes them all back up at one step and exit): an interruption,
    neither a failure nor a restart. The job is placed again, to resume from that backup."""
    if job.status not in PLACED_JOB_STATUSES:
        return  # sent back already (by another worker's exit, or by the interruption itself)
    reason = f"{task.name} {note}; resumes from that backup"
    await transition_job(
        session=tx.session,
        job=job,
        to=JobStatus.pending,
        reason=reason,
        data={"interruption": "stop_signal", "task": task.name, "on_stop": True},
    )
    await unplace_tasks(tx=tx, job=job, reason=reason, failure=False)
    tx.observe(lambda metrics: metrics.interruptions.labels(cause="stop_signal").inc())


async def request_job_restart(tx: Transaction, *, job_id: int) -> None:
    """Re-place the whole job by request: every task gets a new attempt (and may move)."""
    job = await tx.session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    if job.status not in RESTARTABLE:
        raise Conflict(
            f"job {job_id} is {job.status.value}; only a scheduled, running, restarting "
            "or failed job can be restarted"
        )
    # A job that failed (its budget spent, or a failure its policy does not restart) and is
    # restarted by its user starts a new run, with the whole budget again.
    gave_up = job.status is JobStatus.failed
    await replace_job(
        tx=tx, job=job, reason="restart requested", failure=False, fresh_budget=gave_up
    )
    tx.observe(lambda metrics: metrics.restarts.labels(cause="requested").inc())


async def request_task_restart(tx: Transaction, *, job_id: int, task_name: str) -> None:
    """Restart one task where it is, with whatever the role rules restart along with it."""
    session = tx.session
    job = await session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    if job.status not in TASK_RESTARTABLE:
        raise Conflict(
            f"job {job_id} is {job.status.value}; tasks can be restarted only while it runs"
        )
    tasks = list(await session.scalars(select(Task).where(Task.job_id == job_id)))
    task = next((t for t in tasks if t.name == task_name), None)
    if task is None:
        raise NotFound(f"job {job_id} has no task {task_name}")
    if task.host_id is None:
        raise Conflict(f"{task_name} of job {job_id} is not placed yet")
    plan = plan_restart(job.strategy, task_name, [t.name for t in tasks])
    reason = f"restart of {task_name} requested"
    tx.observe(lambda metrics: metrics.restarts.labels(cause="requested").inc())
    if plan.job_level and job.status is not JobStatus.restarting:
        job.restart_count += 1
        await transition_job(
            session=session,
            job=job,
            to=JobStatus.restarting,
            reason=f"{reason}; restarting {', '.join(sorted(plan.tasks))}",
        )
    else:
        await record_event(
            session=session, job=job, kind=EventKind.restart, task=task_name, message=reason
        )
    for member in tasks:
        if member.name in plan.tasks:
            restart_in_place(tx=tx, task=member, delay=0, reason=reason, failure=False)
