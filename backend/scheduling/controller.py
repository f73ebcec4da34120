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
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import selectinload
from sqlalchemy.orm.exc import StaleDataError

from agents.protocol import Hello, RunningTask, ServerMessage, TaskExit, TaskKey, Welcome
from backend.auth import TokenRegistry
from backend.config import Settings
from backend.db import utcnow
from backend.hosts.models import Device, Host
from backend.hosts.service import DeviceInfo, register_host
from backend.jobs.lifecycle import transition_job
from backend.jobs.models import Job, Task
from backend.jobs.spec import JobSpec
from backend.jobs.states import (
    LIVE_TASK_STATUSES,
    TERMINAL_JOB_STATUSES,
    HostStatus,
    JobStatus,
    TaskStatus,
)
from backend.jobs.tfconfig import tf_config
from backend.scheduling import task_events
from backend.scheduling.commands import RESEND_SECONDS, Commands, Outbox, task_key
from backend.scheduling.hub import AgentHub
from backend.scheduling.placement import HostCapacity, TaskNeed, Unplaceable, place
from backend.scheduling.running import RunningReports
from backend.streams.logs import LogStore

log = logging.getLogger(__name__)
T = TypeVar("T")

# A change applied by Controller.apply: it gets the session, the commands and an outbox.
Change = Callable[[AsyncSession, Commands, Outbox], Awaitable[T]]

RECONNECT_CEILING_SECONDS = 10.0  # agents.host.channel.Backoff's ceiling


# Jobs placed in one pass, which is one transaction: a thousand queued jobs placed at once held
# SQLite's write lock for longer than a submission would wait for it (30 s, then a 500).
PLACEMENTS_PER_PASS = 50
PENDING_PAGE = 2 * PLACEMENTS_PER_PASS  # queued jobs loaded at a time while placing
STALE_RETRIES = 5  # times a change is applied again after a job changed under it


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
        self.logs = logs
        self.commands = Commands(settings=settings, tokens=tokens, hub=hub)
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._running = RunningReports()
        self._last_compared: dict[str, float] = {}
        # When each agent was last heard from (monotonic), noted as a frame arrives, before
        # any lock: a busy controller must not mistake its own backlog for a silent host.
        self._last_heard: dict[str, float] = {}
        self._heard_since_recorded: set[str] = set()  # for the next pass to write down
        self._heartbeats_recorded_at = 0.0
        # Hosts whose last comparison found them running exactly what they should, with no
        # command sent to them since: their heartbeats need no comparison until what they
        # run changes. Comparing every host every few seconds anyway was a transaction per
        # host each time, and at a thousand hosts the controller did little else.
        self._settled: set[str] = set()
        # Agents' reports kept for the next pass, which applies them all in one transaction:
        # one transaction per report, each waiting for the lock, did not keep up with a
        # thousand agents starting ten thousand tasks.
        self._reported_starts: dict[str, list[tuple[TaskKey, int]]] = {}
        self._to_compare: dict[str, list[RunningTask]] = {}
        # What the cluster looked like when the queued jobs last found no room (see
        # _place_pending_jobs), and when.
        self._unplaced: tuple[object, ...] | None = None
        self._unplaced_at = 0.0
        # What the hosts have free, kept between passes while nothing but placement changes
        # it (placement updates it as it places). Reading it from the database took most of
        # a pass at a thousand hosts, and a pass runs for every submission. Anything that
        # may free or take capacity otherwise drops it (_capacity_changed); it is read again
        # every few seconds regardless.
        self._capacity: list[HostCapacity] | None = None
        self._capacity_key: tuple[int, float] = (-1, 0.0)
        self._started = time.monotonic()

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
        try:
            await self._reconcile()
        except BaseException:
            self._capacity_changed()  # placed in memory, never committed
            raise

    async def _reconcile(self) -> None:
        async with self._lock, self.sessions() as session:
            outbox = Outbox()
            await self._record_heartbeats(session)
            await self._apply_reported_starts(session, outbox, list(self._reported_starts))
            compared = await self._compare_reported(session, outbox)
            await self._mark_lost_hosts(session, outbox)
            await self._stop_tasks_of_finished_jobs(session, outbox)
            await self._start_restarted_tasks(session, outbox)
            await self._place_pending_jobs(session, outbox)
            await session.commit()
        for host_name, (keys, agrees) in compared.items():
            self._compared(host_name, keys, agrees, outbox)
        self._send(outbox)

    async def _apply_reported_starts(
        self, session: AsyncSession, outbox: Outbox, host_names: list[str]
    ) -> None:
        """Apply the starts these agents reported since the last pass."""
        reports = {name: self._reported_starts.pop(name, []) for name in host_names}
        hosts = await self._hosts_named(session, [name for name, r in reports.items() if r])
        starts = [
            (hosts[name], key, pid)
            for name, started in reports.items()
            if name in hosts
            for key, pid in started
        ]
        if starts:
            await task_events.mark_started_many(
                session=session, commands=self.commands, outbox=outbox, starts=starts
            )

    async def _compare_reported(
        self, session: AsyncSession, outbox: Outbox
    ) -> dict[str, tuple[frozenset[TaskKey], bool]]:
        """Compare each host whose heartbeat asked for it with what it should run, all in
        one query; returns what each reported and whether it agrees, to note after commit."""
        reports, self._to_compare = self._to_compare, {}
        hosts = await self._hosts_named(session, list(reports))
        placed = await self._placed_on(session, [host.id for host in hosts.values()])
        compared = {}
        for name, running in reports.items():
            host = hosts.get(name)
            if host is None:
                continue
            host.status = HostStatus.online
            agrees = await self._sync_running(
                session, outbox, host, running, placed.get(host.id, {}), force=False
            )
            compared[name] = (frozenset(r.key for r in running), agrees)
        return compared

    @staticmethod
    async def _hosts_named(session: AsyncSession, names: list[str]) -> dict[str, Host]:
        if not names:
            return {}
        return {
            host.name: host
            for host in await session.scalars(select(Host).where(Host.name.in_(names)))
        }

    @staticmethod
    async def _placed_on(
        session: AsyncSession, host_ids: list[int]
    ) -> dict[int, dict[TaskKey, tuple[Task, Job]]]:
        """Per host, the attempts it should run: the live tasks placed on it, with their jobs."""
        placed: dict[int, dict[TaskKey, tuple[Task, Job]]] = {}
        if not host_ids:
            return placed
        for task, job in await session.execute(
            select(Task, Job)
            .join(Task.job)
            .where(Task.host_id.in_(host_ids), Task.status.in_(LIVE_TASK_STATUSES))
        ):
            assert task.host_id is not None
            placed.setdefault(task.host_id, {})[task_key(task)] = (task, job)
        return placed

    async def _record_heartbeats(self, session: AsyncSession) -> None:
        """When each agent heard since the last pass was last heard, in one statement."""
        heard = self._heard_since_recorded
        now = time.monotonic()
        # At most once per heartbeat period: a thousand rows written on every pass held
        # SQLite's write lock for much of the time.
        if not heard or now - self._heartbeats_recorded_at < self.settings.heartbeat_seconds:
            return
        self._heartbeats_recorded_at = now
        self._heard_since_recorded = set()
        now_wall, now = utcnow(), time.monotonic()
        await session.execute(
            update(Host),
            [
                {
                    "id": host_id,
                    "last_heartbeat_at": now_wall
                    - timedelta(seconds=now - self._last_heard.get(name, now)),
                }
                for name, host_id in (
                    await session.execute(select(Host.name, Host.id).where(Host.name.in_(heard)))
                ).all()
            ],
        )

    def startup_grace(self) -> float:
        """After a server (re)start, agents need time to notice and reconnect (their backoff
        tops out at 10 s) before silence means a host is gone."""
        return self.settings.heartbeat_timeout_seconds + RECONNECT_CEILING_SECONDS

    async def _mark_lost_hosts(self, session: AsyncSession, outbox: Outbox) -> None:
        timeout = self.settings.heartbeat_timeout_seconds
        now = time.monotonic()
        if now - self._started < self.startup_grace():
            return
        online = await session.scalars(select(Host.name).where(Host.status == HostStatus.online))
        # Not heard from since this server started (and the grace is over): silent too.
        silent = [n for n in online if now - self._last_heard.get(n, self._started) > timeout]
        if not silent:
            return
        self._capacity_changed()
        for host in await session.scalars(select(Host).where(Host.name.in_(silent))):
            host.status = HostStatus.lost
            self._running.forget(host.name)
            log.warning("host %s lost: no heartbeat for %.0fs", host.name, timeout)
            await task_events.mark_host_lost(
                session=session,
                commands=self.commands,
                outbox=outbox,
                host=host,
                reason=f"host {host.name} was lost (no heartbeat for {timeout:.0f}s)",
            )

    async def _stop_tasks_of_finished_jobs(self, session: AsyncSession, outbox: Outbox) -> None:
        rows = await session.execute(
            select(Task, Job)
            .join(Task.job)
            .where(Job.status.in_(TERMINAL_JOB_STATUSES))
            .where(Task.status.in_([*LIVE_TASK_STATUSES, TaskStatus.pending]))
        )
        for task, job in rows:
            if task.status is TaskStatus.pending or task.host is None:
                task.status = TaskStatus.stopped
            else:
                reason = f"job {job.id} is {job.status.value}"
                self.commands.stop(outbox, task.host.name, task_key(task), reason)

    def _old_attempt_running(self, job_id: int, task: str, attempt: int) -> bool:
        """Whether an agent still runs an earlier attempt of this task (its port is taken)."""
        return self._running.earlier_attempt_runs(job_id, task, attempt)

    def _start_if_due(
        self, outbox: Outbox, host: str, job: Job, task: Task, *, force: bool = False
    ) -> None:
        """Start a scheduled attempt once its backoff is over and its predecessor is gone."""
        if task.restart_after is not None and task.restart_after > utcnow():
            return
        if self._old_attempt_running(job.id, task.name, task.attempt):
            return
        self.commands.start(outbox, host, job, task, force=force)

    async def _start_restarted_tasks(self, session: AsyncSession, outbox: Outbox) -> None:
        rows = await session.execute(
            select(Task, Job)
            .join(Task.job)
            .where(Task.status == TaskStatus.scheduled, Task.restart_after.is_not(None))
            .where(Job.status.not_in(TERMINAL_JOB_STATUSES))
        )
        for task, job in rows:
            if task.host is not None and self.hub.connected(task.host.name):
                self._start_if_due(outbox, task.host.name, job, task)

    def _capacity_changed(self) -> None:
        self._capacity = None

    async def _known_capacity(self, session: AsyncSession) -> list[HostCapacity]:
        read_at = self._capacity_key[1]
        fresh = time.monotonic() - read_at < RESEND_SECONDS
        if self._capacity is None or self._capacity_key[0] != self.hub.changes or not fresh:
            self._capacity = await self.capacities(session)
            self._capacity_key = (self.hub.changes, time.monotonic())
        return self._capacity

    async def capacities(self, session: AsyncSession) -> list[HostCapacity]:
        """What each connected online host has free. Read as plain rows, not ORM objects: a
        thousand hosts, their eight thousand devices and ten thousand live tasks, each pass
        that has a job to place."""
        hosts = [
            row
            for row in await session.execute(
                select(
                    Host.id, Host.name, Host.address, Host.port_range_start, Host.port_range_end
                ).where(Host.status == HostStatus.online)
            )
            if self.hub.connected(row.name)
        ]
        devices: dict[int, list[int]] = {}
        for owner, index in await session.execute(
            select(Device.host_id, Device.index).order_by(Device.host_id, Device.index)
        ):
            devices.setdefault(owner, []).append(index)
        busy = await session.execute(
            select(Task.host_id, Task.port, Task.gpu_indices).where(
                Task.status.in_(LIVE_TASK_STATUSES), Task.host_id.is_not(None)
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
                free_gpus=[i for i in devices.get(h.id, []) if i not in used_gpus.get(h.id, ())],
                port_range=(h.port_range_start, h.port_range_end),
                used_ports=used_ports.get(h.id, set()),
            )
            for h in hosts
        ]

    async def _place_pending_jobs(self, session: AsyncSession, outbox: Outbox) -> None:
        queue = list(
            await session.scalars(
                select(Job.id)
                .where(Job.status == JobStatus.pending)
                .order_by(Job.priority.desc(), Job.id)
            )
        )
        if not queue:
            return
        # Jobs that found no room wait for something to change: the queue, the agents
        # connected, what they run, the live tasks. Examining them again on every pass cost
        # a thousand hosts' capacity each time; they are still looked at every few seconds.
        live = select(func.count()).select_from(Task).where(Task.status.in_(LIVE_TASK_STATUSES))
        situation = (
            tuple(queue),
            self.hub.count(),
            self._running.changes,
            await session.scalar(live),
        )
        if situation == self._unplaced and time.monotonic() - self._unplaced_at < RESEND_SECONDS:
            return
        self._unplaced = None
        capacity = await self._known_capacity(session)
        placed = 0
        async for job in self._pending_jobs(session, queue):
            if placed == PLACEMENTS_PER_PASS:
                self.wake()  # the rest in the next pass, after this one has committed
                return
            if any(self._old_attempt_running(job.id, t.name, t.attempt) for t in job.tasks):
                job.reason = "waiting for the tasks of its previous attempt to stop"
                continue
            spec = JobSpec.model_validate(job.spec, strict=False)
            # Every training task is pending here; a stopped evaluator stays stopped.
            waiting = [t for t in job.tasks if t.status is TaskStatus.pending]
            needs = [
                TaskNeed(t.role, t.index, spec.replicas.of(t.role).gpus)  # type: ignore[arg-type]
                for t in waiting
            ]
            # Jobs that do not fit are passed over, so smaller ones behind them can run.
            slots = place(needs, capacity)
            if isinstance(slots, Unplaceable):
                job.reason = slots.reason
                continue
            addresses = {key: f"{slot.address}:{slot.port}" for key, slot in slots.items()}
            for task in waiting:
                slot = slots[(task.role, task.index)]
                task.host_id, task.port, task.gpu_indices = slot.host_id, slot.port, list(slot.gpus)
                task.tf_config = tf_config(addresses, task.role, task.index)
                task.status, task.pid, task.exit_code = TaskStatus.scheduled, None, None
                task.started_at = task.finished_at = None
                self.commands.start(outbox, slot.host_name, job, task, force=True)
            placed += 1
            hosts = sorted({slot.host_name for slot in slots.values()})
            await transition_job(
                session=session,
                job=job,
                to=JobStatus.scheduled,
                reason=f"placed on {', '.join(hosts)}",
            )
        if not placed:
            self._unplaced, self._unplaced_at = situation, time.monotonic()

    @staticmethod
    async def _pending_jobs(session: AsyncSession, queue: list[int]) -> AsyncIterator[Job]:
        """The queued jobs with their tasks, in queue order, loaded a page at a time: a pass
        places a few dozen, and loading every queued job's tasks each pass was most of it."""
        for first in range(0, len(queue), PENDING_PAGE):
            page = queue[first : first + PENDING_PAGE]
            loaded = {
                job.id: job
                for job in await session.scalars(
                    select(Job).where(Job.id.in_(page)).options(selectinload(Job.tasks))
                )
            }
            for job_id in page:
                if job_id in loaded:
                    yield loaded[job_id]

    # --- requests ---------------------------------------------------------------------

    async def apply(self, change: Change[T], *, frees_or_takes_capacity: bool = True) -> T:
        """Run a change to jobs and tasks under the controller's lock, in its own transaction,
        and send the commands it decided once it has committed. Submissions come this way
        too: on SQLite, a writer outside the lock waited for the database's write lock,
        which passes coming one after another could keep from it for minutes."""
        async with self._lock:
            for attempt in range(1, STALE_RETRIES + 1):
                async with self.sessions() as session:
                    outbox = Outbox()
                    if frees_or_takes_capacity:
                        self._capacity_changed()
                    try:
                        result = await change(session, self.commands, outbox)
                        await session.commit()
                    except StaleDataError:
                        # A job changed under this change since it was read (by a writer
                        # outside this lock): nothing of it was kept; apply it again.
                        if attempt == STALE_RETRIES:
                            raise
                        log.info("a job changed while a change was applied; applying it again")
                        continue
                break
        self._send(outbox)
        self.wake()
        return result

    # --- agent events ----------------------------------------------------------------

    async def on_hello(self, hello: Hello) -> list[ServerMessage]:
        """An agent (re)joined: record its host, take its news, and resynchronise it."""
        self.heard_from(hello.name)
        async with self._lock, self.sessions() as session:
            outbox = Outbox()
            self._capacity_changed()  # its devices, and what it still runs, may differ
            host = await register_host(
                session=session,
                name=hello.name,
                address=hello.address,
                port_range=hello.port_range,
                devices=[DeviceInfo(**d.model_dump()) for d in hello.devices],
                agent_version=hello.version,
            )
            # Starts it reported on its previous connection come before what it says now.
            await self._apply_reported_starts(session, outbox, [hello.name])
            self._to_compare.pop(hello.name, None)
            for exit in hello.finished:
                await task_events.apply_exit(
                    session=session, commands=self.commands, outbox=outbox, host=host, exit=exit
                )
            placed = await self._placed_on(session, [host.id])
            agrees = await self._sync_running(
                session, outbox, host, hello.running, placed.get(host.id, {}), force=True
            )
            await session.commit()
        self._compared(hello.name, frozenset(r.key for r in hello.running), agrees, outbox)
        first: list[ServerMessage] = [Welcome(heartbeat_seconds=self.settings.heartbeat_seconds)]
        first += [m for h, m in outbox.messages if h == hello.name]
        self._send(Outbox([(h, m) for h, m in outbox.messages if h != hello.name]))
        self.wake()
        return first

    def heard_from(self, host_name: str) -> None:
        """An agent's frame arrived: it is alive, whatever the controller is busy with."""
        self._last_heard[host_name] = time.monotonic()
        self._heard_since_recorded.add(host_name)

    def on_heartbeat(self, host_name: str, running: list[RunningTask]) -> None:
        keys = frozenset(r.key for r in running)
        self.heard_from(host_name)
        # The heartbeat's time reaches the database with the next reconcile pass, for every
        # host in one statement. So does a comparison with the database, which a heartbeat
        # asks for only when what the agent runs changed, or while a start or stop it has
        # not answered yet may be due again; a settled host costs nothing here.
        if self._running.of(host_name) == keys:
            since = time.monotonic() - self._last_compared.get(host_name, 0.0)
            if host_name in self._settled or since < RESEND_SECONDS:
                return
        self._to_compare[host_name] = running
        self.wake()

    def _compared(
        self, host_name: str, keys: frozenset[TaskKey], agrees: bool, outbox: Outbox
    ) -> None:
        """Note a finished comparison (its outbox not sent yet) of what a host runs."""
        self._last_compared[host_name] = time.monotonic()
        self._running.report(host_name, keys)
        if agrees and all(host != host_name for host, _ in outbox.messages):
            self._settled.add(host_name)
        else:
            self._settled.discard(host_name)

    def _send(self, outbox: Outbox) -> None:
        """Send commands decided in a committed transaction. A host given one is unsettled
        until a comparison sees that it followed it (or the command is sent again)."""
        for host, _ in outbox.messages:
            self._settled.discard(host)
        self.commands.send(outbox)

    async def attempt_ran_on(self, host_name: str, key: TaskKey) -> bool:
        """Whether that host runs or ran this task attempt (a read: no lock needed)."""
        async with self.sessions() as session:
            host = await session.scalar(select(Host).where(Host.name == host_name))
            return host is not None and await task_events.attempt_ran_on(
                session=session, host=host, key=key
            )

    def on_task_started(self, host_name: str, key: TaskKey, pid: int) -> None:
        """A task attempt an agent has started: applied by the next pass."""
        self._reported_starts.setdefault(host_name, []).append((key, pid))
        # A heartbeat waiting to be compared was sent before this start: comparing it after
        # the start is applied would take the task for one that has already gone.
        self._to_compare.pop(host_name, None)
        self.wake()

    async def on_task_exited(self, host_name: str, exit: TaskExit) -> None:
        async with self._lock, self.sessions() as session:
            outbox = Outbox()
            self._capacity_changed()
            # Its starts, reported before this exit, are applied first; a heartbeat waiting
            # to be compared is older than the exit, and the next one says what runs now.
            await self._apply_reported_starts(session, outbox, [host_name])
            self._to_compare.pop(host_name, None)
            host = await session.scalar(select(Host).where(Host.name == host_name))
            if host is None:
                return
            await task_events.apply_exit(
                session=session, commands=self.commands, outbox=outbox, host=host, exit=exit
            )
            await session.commit()
        # Its port and GPUs are free now: a restarted attempt need not wait for the agent's
        # next heartbeat to be told so (see _old_attempt_running).
        self._running.exited(host_name, exit.key)
        self._send(outbox)
        self.wake()  # freed capacity may let a pending job in

    async def _sync_running(
        self,
        session: AsyncSession,
        outbox: Outbox,
        host: Host,
        running: list[RunningTask],
        placed_here: dict[TaskKey, tuple[Task, Job]],
        *,
        force: bool,
    ) -> bool:
        """Compare what the agent runs with what it should run (`placed_here`, from
        _placed_on), and send the difference. Returns whether the two agree once this is
        applied, with nothing left to start or stop."""
        reported = {r.key: r.pid for r in running}
        agrees = True
        for key, pid in reported.items():
            task, job = placed_here.get(key, (None, None))
            if not task_events.wanted_on(task, job, host, key):
                self.commands.stop(
                    outbox, host.name, key, "this attempt should not run", force=force
                )
                agrees = False
            elif task is not None and task.status is TaskStatus.scheduled:
                # Its task_started was lost with a dropped connection.
                agrees = False  # compared again soon: what this changed was not loaded
                await task_events.mark_started(
                    session=session,
                    commands=self.commands,
                    outbox=outbox,
                    host=host,
                    key=key,
                    pid=pid,
                )
        for key, (task, job) in placed_here.items():
            if key in reported:
                continue
            if job.status.is_terminal:
                self._capacity_changed()
                task.status, task.finished_at = TaskStatus.stopped, utcnow()
            elif task.status is TaskStatus.running:
                # Exits travel before heartbeats on the same channel: this one went unseen.
                gone = TaskExit(key=key, exit_code=None, error="the agent no longer runs it")
                agrees = False  # a restart it causes may place attempts here
                self._capacity_changed()
                await task_events.apply_exit(
                    session=session, commands=self.commands, outbox=outbox, host=host, exit=gone
                )
            else:
                self._start_if_due(outbox, host.name, job, task, force=force)
                agrees = False
        return agrees
