"""Stragglers: a parameter_server worker much slower than its job's others.

The chief's per-worker closure counters (the board, backend.streams.throughput) give each
worker's rate over the last STRATA_STRAGGLER_WINDOW_SECONDS; the rule (straggler_rule) flags a
worker under the median / 1.5. Judged only with a full window of the chief's current attempt,
and only workers whose current attempt has run a whole window (a worker restarting, down or
catching up is no straggler). Each job is judged every JUDGE_SECONDS at most.

A newly slow worker is recorded as a `health` event (finding `straggler`, the evidence in its
data: every worker's rate, the median, the window, the tasks' CPU use where the agents sampled
it) and in `/metrics`; one back over the line gets a `straggler_cleared` event. With the spec's
`stragglers: restart` the slowest newly slow worker is moved to another host
(straggler_moves), at most once per job every STRATA_STRAGGLER_COOLDOWN_SECONDS, so that a
job whose slowness follows it (its data, not a host) is not moved round and round; within the
cooldown, or when no other host has room, it is only reported, and the event says why.

Under multi_worker_mirrored every worker steps together (each step waits for all), so rates
say nothing of who is slow: straggler detection is for parameter_server jobs. What is flagged
and when a job last moved are kept in memory: a server restart judges afresh.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from agents.vocabulary import Role
from backend.config import Settings
from backend.db import utcnow
from backend.jobs.events import EventKind, record_event
from backend.jobs.models import Job, Task
from backend.jobs.states import PLACED_JOB_STATUSES, JobStatus, TaskStatus
from backend.scheduling.straggler_moves import Moved, move_worker
from backend.scheduling.straggler_rule import Verdict, judge, per_second
from backend.scheduling.transaction import Transaction
from backend.streams.throughput import ThroughputBoard, WindowRates

JUDGE_SECONDS = 5.0

# The CPU use an agent last sampled for an attempt (job id, task, attempt), if it did.
CpuPercent = Callable[[int, str, int], float | None]


@dataclass(frozen=True)
class Slow:
    attempt: int  # of the worker found slow: a new attempt starts unflagged


class Stragglers:
    def __init__(
        self,
        *,
        board: ThroughputBoard,
        settings: Settings,
        cpu: CpuPercent | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.board = board
        self.settings = settings
        self.cpu = cpu or (lambda job_id, task, attempt: None)
        self.clock = clock
        self.slow: dict[int, dict[str, Slow]] = {}  # job -> worker -> when found
        self.judged_at: dict[int, float] = {}
        self.moved_at: dict[int, float] = {}  # job -> when a worker of it last moved

    def flagged(self) -> list[tuple[int, str]]:
        """(job id, worker) slow now, for /metrics."""
        return sorted((job_id, worker) for job_id, slow in self.slow.items() for worker in slow)

    async def reconcile(self, tx: Transaction) -> None:
        if self.settings.straggler_window_seconds <= 0:
            return
        now = self.clock()
        due = [
            job_id
            for job_id in self.board.job_ids() | set(self.slow)
            if now - self.judged_at.get(job_id, float("-inf")) >= JUDGE_SECONDS
        ]
        if not due:
            return
        rows = await tx.session.execute(select(Job.id, Job.status).where(Job.id.in_(due)))
        statuses = {job_id: status for job_id, status in rows}
        for job_id in due:
            self.judged_at[job_id] = now
            status = statuses.get(job_id)
            if status not in PLACED_JOB_STATUSES:
                self._forget(job_id)  # ended or sent back: its next run is judged afresh
            elif status is JobStatus.running and (rates := self.board.rates(job_id)):
                await self._judge(tx, job_id, rates)

    def _forget(self, job_id: int) -> None:
        self.board.forget(job_id)
        self.slow.pop(job_id, None)
        self.judged_at.pop(job_id, None)

    async def _judge(self, tx: Transaction, job_id: int, window: WindowRates) -> None:
        session = tx.session
        tasks = list(await session.scalars(select(Task).where(Task.job_id == job_id)))
        chief = next((t for t in tasks if t.role == Role.chief), None)
        if chief is None or chief.attempt != self.board.attempt(job_id):
            return  # counters of another chief attempt (the new one has not reported yet)
        ran_since = utcnow() - timedelta(seconds=window.window)
        workers = {
            t.name: t
            for t in tasks
            if t.role == Role.worker
            and t.status is TaskStatus.running
            and t.started_at is not None
            and t.started_at <= ran_since
            and t.name in window.rates
        }
        before = {
            name: slow
            for name, slow in self.slow.get(job_id, {}).items()
            if name in workers and workers[name].attempt == slow.attempt
        }
        verdict = judge({name: window.rates[name] for name in workers}, before)
        if verdict is None:
            self.slow.pop(job_id, None)
            return
        job = await session.get_one(Job, job_id)
        found = sorted(verdict.slow - set(before), key=lambda name: window.rates[name])
        moved: str | None = None
        for name in found:
            worker = workers[name]
            evidence = self._evidence(job_id, workers, window, verdict, name)
            to = await self._found(tx, job, tasks, worker, evidence, window, verdict)
            moved = moved or to  # once moved, the job restarts: the others are reported
        for name in sorted(set(before) - verdict.slow):
            await record_event(
                session=session,
                job=job,
                kind=EventKind.health,
                task=name,
                message=f"{name} is no longer slow: {self._rates_text(name, window, verdict)}",
                data={
                    **self._evidence(job_id, workers, window, verdict, name),
                    "finding": "straggler_cleared",
                },
            )
        now = self.clock()
        slow_now = {name: Slow(workers[name].attempt) for name in verdict.slow}

        def note() -> None:
            if moved is not None:
                self.moved_at[job_id] = now
                self.board.forget(job_id)  # the chief restarts: its counters start again
                self.slow.pop(job_id, None)
            elif slow_now:
                self.slow[job_id] = slow_now
            else:
                self.slow.pop(job_id, None)

        tx.after_commit.append(note)

    async def _found(
        self,
        tx: Transaction,
        job: Job,
        tasks: list[Task],
        worker: Task,
        evidence: dict[str, Any],
        window: WindowRates,
        verdict: Verdict,
    ) -> str | None:
        """Record a newly slow worker, and move it if the spec says so and it may be: the
        host it moved to, if it did."""
        name = worker.name
        rates = self._rates_text(name, window, verdict)
        from_host = worker.host.name if worker.host is not None else None
        not_moved: str | None = None
        moved: str | None = None
        if job.job_spec.stragglers == "restart":
            since = self.clock() - self.moved_at.get(job.id, float("-inf"))
            cooldown = self.settings.straggler_cooldown_seconds
            if since < cooldown:
                not_moved = f"a worker of this job moved {since:.0f}s ago (cooldown {cooldown:g}s)"
            else:
                reason = f"{name} moved from {from_host} to another host: {rates}"
                outcome = await move_worker(
                    tx=tx, job=job, tasks=tasks, worker=worker, reason=reason
                )
                if isinstance(outcome, Moved):
                    moved = outcome.to_host
                else:
                    not_moved = outcome.why
        if moved is not None:
            message = f"{name} moved from {from_host} to {moved}: {rates}"
        else:
            message = f"{name} is slow: {rates}" + (
                f"; not moved: {not_moved}" if not_moved else ""
            )
        action = "moved" if moved is not None else "reported"
        data = {
            **evidence,
            "action": action,
            "from": from_host,
            "to": moved,
            "not_moved": not_moved,
        }
        await record_event(
            session=tx.session,
            job=job,
            kind=EventKind.health,
            task=name,
            message=message,
            data=data,
        )
        tx.observe(lambda metrics: metrics.straggler_findings.labels(action=action).inc())
        return moved

    def _rates_text(self, name: str, window: WindowRates, verdict: Verdict) -> str:
        return (
            f"{per_second(window.rates[name])} closures/s vs median "
            f"{per_second(verdict.median)} over {window.window:g}s"
        )

    def _evidence(
        self,
        job_id: int,
        workers: dict[str, Task],
        window: WindowRates,
        verdict: Verdict,
        name: str,
    ) -> dict[str, Any]:
        cpu = {
            worker: percent
            for worker, task in sorted(workers.items())
            if (percent := self.cpu(job_id, worker, task.attempt)) is not None
        }
        return {
            "finding": "straggler",
            "attempt": workers[name].attempt,
            "rate": round(window.rates[name], 3),
            "median": round(verdict.median, 3),
            "rates": {worker: round(window.rates[worker], 3) for worker in sorted(workers)},
            "window_seconds": window.window,
            "cpu_percent": cpu,
        }
