"""The controller: turns the difference between desired and actual state into commands.

Level-triggered, like a Kubernetes controller. The database holds what should run; agents
report what does run (in hello and heartbeats) and what exited. Every pass and every agent
event compares the two and sends start and stop commands until they agree, so nothing
depends on a message arriving exactly once. All changes to job and task state go through
this class under one lock, so that concurrent agent events never interleave.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import selectinload

from agents.protocol import Hello, RunningTask, ServerMessage, StopTask, TaskExit, TaskKey, Welcome
from backend.auth import TokenRegistry
from backend.config import Settings
from backend.db import utcnow
from backend.hosts.models import Host
from backend.hosts.service import DeviceInfo, register_host
from backend.jobs.lifecycle import record_event, transition_job
from backend.jobs.models import Job, Task
from backend.jobs.spec import JobSpec
from backend.jobs.states import ACTIVE_JOB_STATUSES, HostStatus, JobStatus, TaskStatus
from backend.jobs.tfconfig import tf_config
from backend.scheduling.hub import AgentHub
from backend.scheduling.launch import start_message
from backend.scheduling.outcome import judge_exit
from backend.scheduling.placement import HostCapacity, TaskNeed, Unplaceable, place
from backend.streams.logs import LogStore

log = logging.getLogger(__name__)

LIVE = (TaskStatus.scheduled, TaskStatus.running)
RESEND_SECONDS = 5.0  # how long an unanswered start or stop waits before it is sent again


@dataclass
class Outbox:
    """Commands decided inside a transaction, sent only once it has committed."""

    messages: list[tuple[str, ServerMessage]] = field(default_factory=list)

    def add(self, host: str, message: ServerMessage) -> None:
        self.messages.append((host, message))


class Controller:
    def __init__(
        self,
        *,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        hub: AgentHub,
        tokens: TokenRegistry,
        logs: LogStore,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.hub = hub
        self.tokens = tokens
        self.logs = logs
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._sent: dict[tuple[str, TaskKey], float] = {}  # (kind, key) → monotonic time
        self._last_running: dict[str, frozenset[TaskKey]] = {}
        self._last_seen_written: dict[str, float] = {}

    def wake(self) -> None:
        """Ask for a reconcile pass now (a job was submitted, cancelled, an agent joined)."""
        self._wake.set()

    # --- the loop -------------------------------------------------------------------

    async def run(self) -> None:
        failures = 0
        while True:
            period = self.settings.reconcile_seconds
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=period * random.uniform(0.8, 1.2))
            self._wake.clear()
            try:
                await self.reconcile()
                failures = 0
            except Exception:
                failures += 1
                log.exception("reconcile pass failed (%d in a row)", failures)
                await asyncio.sleep(min(30.0, period * 2**failures) * random.uniform(0.5, 1.0))

    async def reconcile(self) -> None:
        async with self._lock, self.sessions() as session:
            outbox = Outbox()
            await self._mark_lost_hosts(session, outbox)
            await self._stop_tasks_of_finished_jobs(session, outbox)
            await self._place_pending_jobs(session, outbox)
            await session.commit()
        self._send(outbox)

    def _send(self, outbox: Outbox) -> None:
        for host, message in outbox.messages:
            self.hub.send(host, message)

    def _due(self, kind: str, key: TaskKey) -> bool:
        """Throttle repeated commands for the same task attempt."""
        now = time.monotonic()
        if now - self._sent.get((kind, key), -RESEND_SECONDS) < RESEND_SECONDS:
            return False
        self._sent[(kind, key)] = now
        return True

    # --- reconcile passes ------------------------------------------------------------

    async def _mark_lost_hosts(self, session: AsyncSession, outbox: Outbox) -> None:
        timeout = self.settings.heartbeat_timeout_seconds
        cutoff = utcnow().timestamp() - timeout
        hosts = await session.scalars(select(Host).where(Host.status == HostStatus.online))
        for host in hosts:
            if host.last_heartbeat_at.timestamp() >= cutoff:
                continue
            host.status = HostStatus.lost
            log.warning("host %s lost: no heartbeat for %.0fs", host.name, timeout)
            tasks = await session.scalars(
                select(Task).where(Task.host_id == host.id, Task.status.in_(LIVE))
            )
            for task in tasks:
                job = await self._job(session, task.job_id)
                task.status, task.finished_at = TaskStatus.lost, utcnow()
                await record_event(
                    session=session,
                    job=job,
                    kind="task_status",
                    task=task.name,
                    message=f"{task.name} lost with host {host.name}",
                    data={"to": "lost", "attempt": task.attempt},
                )
                if job.status in ACTIVE_JOB_STATUSES:
                    await self._end_job(
                        session,
                        outbox,
                        job,
                        JobStatus.failed,
                        f"host {host.name} was lost (no heartbeat for {timeout:.0f}s)",
                    )

    async def _stop_tasks_of_finished_jobs(self, session: AsyncSession, outbox: Outbox) -> None:
        rows = await session.execute(
            select(Task, Job)
            .join(Task.job)
            .where(Job.status.in_([JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled]))
            .where(Task.status.in_([*LIVE, TaskStatus.pending]))
        )
        for task, job in rows:
            if task.status is TaskStatus.pending or task.host is None:
                task.status = TaskStatus.stopped
                continue
            self._stop(outbox, task, f"job {job.id} is {job.status.value}")

    def _stop(self, outbox: Outbox, task: Task, reason: str) -> None:
        assert task.host is not None
        key = _key(task)
        if self._due("stop", key):
            outbox.add(
                task.host.name,
                StopTask(key=key, grace_seconds=self.settings.stop_grace_seconds, reason=reason),
            )

    async def _capacities(self, session: AsyncSession) -> list[HostCapacity]:
        hosts = [
            h
            for h in await session.scalars(
                select(Host)
                .where(Host.status == HostStatus.online)
                .options(selectinload(Host.devices))
            )
            if self.hub.connected(h.name)
        ]
        busy = await session.execute(
            select(Task.host_id, Task.port, Task.gpu_indices).where(
                Task.status.in_(LIVE), Task.host_id.is_not(None)
            )
        )
        used_gpus: dict[int, set[int]] = {}
        used_ports: dict[int, set[int]] = {}
        for host_id, port, gpus in busy:
            assert host_id is not None
            used_gpus.setdefault(host_id, set()).update(gpus or [])
            if port is not None:
                used_ports.setdefault(host_id, set()).add(port)
        return [
            HostCapacity(
                host_id=h.id,
                name=h.name,
                address=h.address,
                free_gpus=[d.index for d in h.devices if d.index not in used_gpus.get(h.id, set())],
                port_range=(h.port_range_start, h.port_range_end),
                used_ports=used_ports.get(h.id, set()),
            )
            for h in hosts
        ]

    async def _place_pending_jobs(self, session: AsyncSession, outbox: Outbox) -> None:
        jobs = list(
            await session.scalars(
                select(Job)
                .where(Job.status == JobStatus.pending)
                .options(selectinload(Job.tasks))
                .order_by(Job.priority.desc(), Job.id)
            )
        )
        if not jobs:
            return
        capacity = await self._capacities(session)
        for job in jobs:
            spec = JobSpec.model_validate(job.spec, strict=False)
            needs = [TaskNeed(t.role, t.index, spec.replicas.of(t.role).gpus) for t in job.tasks]  # type: ignore[arg-type]
            # Jobs that do not fit are passed over, so smaller ones behind them can run.
            slots = place(needs, capacity)
            if isinstance(slots, Unplaceable):
                job.reason = slots.reason
                continue
            addresses = {key: f"{slot.address}:{slot.port}" for key, slot in slots.items()}
            names = {slot.host_id: slot.host_name for slot in slots.values()}
            for task in job.tasks:
                slot = slots[(task.role, task.index)]
                task.host_id, task.port, task.gpu_indices = slot.host_id, slot.port, list(slot.gpus)
                task.tf_config = tf_config(addresses, task.role, task.index)
                task.status, task.pid, task.exit_code = TaskStatus.scheduled, None, None
                task.started_at = task.finished_at = None
                outbox.add(slot.host_name, self._start_message(spec, job, task))
                self._due("start", _key(task))
            await transition_job(
                session=session,
                job=job,
                to=JobStatus.scheduled,
                reason=f"placed on {', '.join(sorted(names.values()))}",
            )

    def _start_message(self, spec: JobSpec, job: Job, task: Task) -> ServerMessage:
        assert task.port is not None and task.tf_config is not None
        return start_message(
            spec=spec,
            key=_key(task),
            port=task.port,
            gpus=list(task.gpu_indices),
            tf_config=task.tf_config,
            task_token=self.tokens.task_token(job.id),
            checkpoint_root=self.settings.checkpoints,
        )

    async def _end_job(
        self,
        session: AsyncSession,
        outbox: Outbox,
        job: Job,
        status: JobStatus,
        reason: str,
        data: dict[str, object] | None = None,
    ) -> None:
        await transition_job(session=session, job=job, to=status, reason=reason, data=data)
        for task in await session.scalars(select(Task).where(Task.job_id == job.id)):
            if task.status is TaskStatus.pending:
                task.status = TaskStatus.stopped
            elif task.status in LIVE and task.host is not None:
                self._stop(outbox, task, reason)

    async def _job(self, session: AsyncSession, job_id: int) -> Job:
        return await session.get_one(Job, job_id)

    # --- agent events ----------------------------------------------------------------

    async def on_hello(self, hello: Hello) -> list[ServerMessage]:
        """An agent (re)joined: record its host, take its news, and resynchronise it."""
        async with self._lock, self.sessions() as session:
            outbox = Outbox()
            host = await register_host(
                session=session,
                name=hello.name,
                address=hello.address,
                port_range=hello.port_range,
                devices=[DeviceInfo(**d.model_dump()) for d in hello.devices],
                agent_version=hello.version,
            )
            for exit in hello.finished:
                await self._apply_exit(session, outbox, host, exit)
            await self._sync_running(session, outbox, host, hello.running, force=True)
            await session.commit()
        self._last_seen_written[hello.name] = time.monotonic()
        first: list[ServerMessage] = [Welcome(heartbeat_seconds=self.settings.heartbeat_seconds)]
        first += [m for h, m in outbox.messages if h == hello.name]
        self._send(Outbox([(h, m) for h, m in outbox.messages if h != hello.name]))
        self.wake()
        return first

    async def on_heartbeat(self, host_name: str, running: list[RunningTask]) -> None:
        keys = frozenset(r.key for r in running)
        now = time.monotonic()
        write_due = (
            now - self._last_seen_written.get(host_name, 0)
            >= self.settings.heartbeat_timeout_seconds / 4
        )
        if not write_due and self._last_running.get(host_name) == keys:
            return  # nothing new: spare the database
        async with self._lock, self.sessions() as session:
            outbox = Outbox()
            host = await session.scalar(select(Host).where(Host.name == host_name))
            if host is None:
                return
            host.last_heartbeat_at = utcnow()
            if host.status is not HostStatus.online:
                host.status = HostStatus.online
            await self._sync_running(session, outbox, host, running, force=False)
            await session.commit()
        self._last_seen_written[host_name] = now
        self._last_running[host_name] = keys
        self._send(outbox)

    async def on_task_started(self, host_name: str, key: TaskKey, pid: int) -> None:
        async with self._lock, self.sessions() as session:
            outbox = Outbox()
            host = await session.scalar(select(Host).where(Host.name == host_name))
            task = await self._task(session, key)
            if host is None or task is None:
                return
            await self._mark_started(session, outbox, host, task, key, pid)
            await session.commit()
        self._send(outbox)

    async def on_task_exited(self, host_name: str, exit: TaskExit) -> None:
        async with self._lock, self.sessions() as session:
            outbox = Outbox()
            host = await session.scalar(select(Host).where(Host.name == host_name))
            if host is None:
                return
            await self._apply_exit(session, outbox, host, exit)
            await session.commit()
        self._send(outbox)
        self.wake()  # freed capacity may let a pending job in

    # --- shared steps ----------------------------------------------------------------

    async def _task(self, session: AsyncSession, key: TaskKey) -> Task | None:
        role, index = key.task.split(":")
        return await session.scalar(
            select(Task).where(
                Task.job_id == key.job_id, Task.role == role, Task.index == int(index)
            )
        )

    def _wanted_on(self, task: Task | None, job: Job | None, host: Host, key: TaskKey) -> bool:
        return (
            task is not None
            and job is not None
            and job.status in ACTIVE_JOB_STATUSES
            and task.status in LIVE
            and task.host_id == host.id
            and task.attempt == key.attempt
        )

    async def _mark_started(
        self, session: AsyncSession, outbox: Outbox, host: Host, task: Task, key: TaskKey, pid: int
    ) -> None:
        job = await self._job(session, task.job_id)
        if not self._wanted_on(task, job, host, key):
            if self._due("stop", key):
                outbox.add(
                    host.name,
                    StopTask(
                        key=key, grace_seconds=self.settings.stop_grace_seconds, reason="not wanted"
                    ),
                )
            return
        if task.status is TaskStatus.scheduled:
            task.status, task.pid, task.started_at = TaskStatus.running, pid, utcnow()
            await record_event(
                session=session,
                job=job,
                kind="task_status",
                task=task.name,
                message=f"{task.name} started on {host.name} (pid {pid})",
                data={"to": "running", "attempt": task.attempt, "pid": pid},
            )
        if job.status in (JobStatus.scheduled, JobStatus.restarting):
            siblings = await session.scalars(select(Task).where(Task.job_id == job.id))
            if all(t.status is TaskStatus.running for t in siblings if t.role != "evaluator"):
                await transition_job(
                    session=session, job=job, to=JobStatus.running, reason="all tasks are running"
                )

    async def _apply_exit(
        self, session: AsyncSession, outbox: Outbox, host: Host, exit: TaskExit
    ) -> None:
        key = exit.key
        task = await self._task(session, key)
        if task is None or task.attempt != key.attempt or task.host_id != host.id:
            return  # an exit of an attempt we no longer track
        if task.status not in LIVE:
            return  # already applied (the agent resent it after a reconnect)
        job = await self._job(session, task.job_id)
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
        )
        task.status, task.exit_code, task.finished_at = (
            outcome.task_status,
            exit.exit_code,
            utcnow(),
        )
        details: dict[str, object] = {
            "to": outcome.task_status.value,
            "attempt": task.attempt,
            "exit_code": exit.exit_code,
            "signal": exit.signal,
            "log_tail": exit.log_tail,
        }
        await record_event(
            session=session,
            job=job,
            kind="task_status",
            task=task.name,
            message=outcome.reason,
            data=details,
        )
        if outcome.job_status is not None:
            await self._end_job(
                session, outbox, job, outcome.job_status, outcome.reason, data=details
            )

    async def _sync_running(
        self,
        session: AsyncSession,
        outbox: Outbox,
        host: Host,
        running: Iterable[RunningTask],
        *,
        force: bool,
    ) -> None:
        """Compare what the agent runs with what it should run, and send the difference."""
        reported = {r.key: r for r in running}
        for key, entry in reported.items():
            task = await self._task(session, key)
            job = await session.get(Job, key.job_id) if task is not None else None
            if self._wanted_on(task, job, host, key):
                assert task is not None
                if task.status is TaskStatus.scheduled:  # its task_started was lost
                    await self._mark_started(session, outbox, host, task, key, entry.pid)
            elif force or self._due("stop", key):
                self._sent[("stop", key)] = time.monotonic()
                outbox.add(
                    host.name,
                    StopTask(
                        key=key, grace_seconds=self.settings.stop_grace_seconds, reason="not wanted"
                    ),
                )
        expected = await session.scalars(
            select(Task).where(Task.host_id == host.id, Task.status.in_(LIVE))
        )
        for task in expected:
            key = _key(task)
            if key in reported:
                continue
            job = await self._job(session, task.job_id)
            if job.status.is_terminal:
                task.status, task.finished_at = TaskStatus.stopped, utcnow()
            elif task.status is TaskStatus.running:
                # Exits travel before heartbeats on the same channel: this one is gone unseen.
                await self._apply_exit(
                    session,
                    outbox,
                    host,
                    TaskExit(key=key, exit_code=None, error="the agent no longer runs it"),
                )
            elif force or self._due("start", key):
                self._sent[("start", key)] = time.monotonic()
                spec = JobSpec.model_validate(job.spec, strict=False)
                outbox.add(host.name, self._start_message(spec, job, task))


def _key(task: Task) -> TaskKey:
    return TaskKey(job_id=task.job_id, task=task.name, attempt=task.attempt)
