"""Hangs: a running job whose step has stood still for its hang timeout is declared hung.

Every process alive and heartbeating, and no step: a wedged GPU, a collective waiting for a
peer that never comes, a read that never returns. The runtimes' progress reports (the
board, backend.streams.progress) say when each job's step last moved; a busy phase (the
first step's tracing, an evaluation, a checkpoint write, an export) is no hang, up to
BUSY_FACTOR times the timeout (at least BUSY_FLOOR seconds).

Declaring is two passes apart: the first records the evidence as a `health` event and asks
the agents for the stacks of every live task (into their logs); STACKS_SECONDS later the
job restarts every training task from its checkpoint (restarts.after_hang), or fails when
its policy allows no more. A server restart in between loses only the wait: the job is
found hung again.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

from sqlalchemy import select

from agents.protocol import TaskKey
from backend.config import Settings
from backend.jobs.events import EventKind, record_event
from backend.jobs.models import Job, Task
from backend.jobs.spec import MIN_HANG_TIMEOUT
from backend.jobs.states import LIVE_TASK_STATUSES, PLACED_JOB_STATUSES, JobStatus
from backend.scheduling.restarts import after_hang
from backend.scheduling.task_events import end_job
from backend.scheduling.transaction import Transaction
from backend.streams.progress import ProgressBoard, Quiet

STEP_TIME_FACTOR = 5.0  # the default timeout is at least this many median step times
BUSY_FACTOR = 5.0
BUSY_FLOOR = 300.0
STACKS_SECONDS = 3.0  # from asking for stacks to the restart


def hang_timeout(
    spec_timeout: float | None, default: float, median_step: float | None
) -> float | None:
    """Seconds the job's step may stand still; None: not watched."""
    if spec_timeout is not None:
        return spec_timeout or None
    if default <= 0:
        return None
    return max(default, STEP_TIME_FACTOR * median_step) if median_step else default


def duration(seconds: float) -> str:
    """3m12s, 45s, 1h02m."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def hang_reason(quiet: Quiet) -> str:
    median = quiet.median_step_seconds
    step_time = f"median step {median:.2g} s" if median is not None else "no step time yet"
    what = f"{quiet.busy} for" if quiet.busy else "no step for"
    return (
        f"hung: {what} {duration(quiet.seconds)} at step {quiet.step} ({step_time}); "
        "stacks in the job's logs"
    )


class Hangs:
    def __init__(
        self,
        *,
        board: ProgressBoard,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.board = board
        self.settings = settings
        self.clock = clock
        self.declared: dict[int, tuple[float, str]] = {}  # job -> (when, reason)

    async def reconcile(self, tx: Transaction) -> None:
        watched = self.board.job_ids() | set(self.declared)
        if not watched:
            return
        session = tx.session
        rows = await session.execute(select(Job.id, Job.status).where(Job.id.in_(watched)))
        statuses = {job_id: status for job_id, status in rows}
        for job_id in watched:
            status = statuses.get(job_id)
            if status not in PLACED_JOB_STATUSES:
                self.board.forget(job_id)  # ended or sent back: its next run reports afresh
            if status is not JobStatus.running:
                self.declared.pop(job_id, None)
        for job_id, status in statuses.items():
            if status is not JobStatus.running:
                continue
            if job_id in self.declared:
                await self._restart_if_due(tx, job_id)
            elif self.board.quiet(job_id, at_least=MIN_HANG_TIMEOUT):
                await self._check(tx, job_id)

    async def _check(self, tx: Transaction, job_id: int) -> None:
        session = tx.session
        job = await session.get_one(Job, job_id)
        tasks = list(await session.scalars(select(Task).where(Task.job_id == job_id)))
        quiet = self.board.quiet(job_id, {task.name: task.attempt for task in tasks})
        if quiet is None:
            return
        timeout = hang_timeout(
            job.job_spec.hang_timeout, self.settings.hang_timeout, quiet.median_step_seconds
        )
        if timeout is None:
            return
        limit = timeout if quiet.busy is None else max(BUSY_FACTOR * timeout, BUSY_FLOOR)
        if quiet.seconds < limit:
            return
        reason = hang_reason(quiet)
        await record_event(
            session=session,
            job=job,
            kind=EventKind.health,
            message=f"{reason}; collecting stacks before the restart",
            data={
                "finding": "hung",
                "quiet_seconds": round(quiet.seconds, 1),
                "timeout_seconds": timeout,
                "step": quiet.step,
                "median_step_seconds": quiet.median_step_seconds,
                "busy": quiet.busy,
                "watched": list(quiet.tasks),
            },
        )
        by_host: dict[str, list[TaskKey]] = defaultdict(list)
        for task in tasks:
            if task.host is not None and task.status in LIVE_TASK_STATUSES:
                by_host[task.host.name].append(task.key)
        for host, keys in by_host.items():
            tx.collect_stacks(host, keys, reason)
        now = self.clock()
        tx.after_commit.append(lambda: self.declared.__setitem__(job_id, (now, reason)))

    async def _restart_if_due(self, tx: Transaction, job_id: int) -> None:
        declared_at, reason = self.declared[job_id]
        if self.clock() - declared_at < STACKS_SECONDS:
            return
        job = await tx.session.get_one(Job, job_id)
        decision = await after_hang(tx=tx, job=job, reason=reason)
        if not decision.restarted:
            await end_job(tx=tx, job=job, status=JobStatus.failed, reason=decision.reason)

        def done() -> None:
            self.declared.pop(job_id, None)
            self.board.forget(job_id)

        tx.after_commit.append(done)
