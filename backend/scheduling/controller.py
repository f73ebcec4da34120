"""The controller: turns the difference between desired and actual state into commands.

Level-triggered, like a Kubernetes controller. The database holds what should run; agents
report what does run (in hello and heartbeats) and what exited. A pass runs the reconcilers
(backend.scheduling.reconcilers) in one transaction; requests and agent reports are applied
the same way. Every change to jobs and tasks goes through this class, under one lock, and
jobs are versioned: a change that read a job another writer has changed since is applied
again on fresh state, so an acknowledged request is never undone by something concurrent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal, TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from agents.protocol import (
    HeartbeatPeriod,
    Hello,
    RunningTask,
    ServerMessage,
    TaskExit,
    TaskKey,
    Welcome,
)
from backend.auth import TokenRegistry
from backend.config import Settings
from backend.hosts.models import Host
from backend.hosts.schemas import HostRead
from backend.hosts.service import (
    DeviceInfo,
    find_host,
    forget_host,
    identity_clash,
    register_host,
)
from backend.monitoring.instruments import ServerMetrics
from backend.scheduling import task_events
from backend.scheduling.cluster import ClusterView, StartMode
from backend.scheduling.hub import AgentHub
from backend.scheduling.native import RESEND_SECONDS, NativeAgents
from backend.scheduling.pace import HeartbeatPace
from backend.scheduling.reconcilers import Reconciler
from backend.scheduling.reconcilers.finished_jobs import FinishedJobs
from backend.scheduling.reconcilers.heartbeat_times import HeartbeatTimes
from backend.scheduling.reconcilers.lost_hosts import LostHosts
from backend.scheduling.reconcilers.pending_jobs import PendingJobs
from backend.scheduling.reconcilers.reported_starts import ReportedStarts, apply_reported_starts
from backend.scheduling.reconcilers.restarted_tasks import RestartedTasks
from backend.scheduling.reconcilers.running_tasks import (
    RunningTasks,
    note_after_commit,
    placed_on,
    sync_running,
)
from backend.scheduling.stale import applied_again_if_stale
from backend.scheduling.transaction import Outbox, Transaction

log = logging.getLogger(__name__)
T = TypeVar("T")

# A change applied by Controller.apply, inside its transaction.
Change = Callable[[Transaction], Awaitable[T]]
# What holds the lock, as strata_controller_lock_held_seconds counts it.
LockHolder = Literal["pass", "request", "agent"]

PASS_GAP_SECONDS = 0.05  # the least time from one pass's start to the next one's
# ... and, when changes were waiting for the lock as the pass ended, at least this many times
# the time it held the lock: under load a pass holds it at most half the time, so submissions
# and agents' reports get their turn, and each pass takes in more at once (its fixed queries
# shared by more jobs and starts). With none waiting, the next pass need not leave room.
PASS_GAP_FACTOR = 2.0


class Controller:
    def __init__(
        self,
        *,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        hub: AgentHub,
        tokens: TokenRegistry,
        monitor: ServerMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.monitor = monitor  # times passes; transactions record what they decided
        self.sessions = sessions
        self.view = ClusterView()
        self.pace = HeartbeatPace.from_settings(settings)
        self.backend = NativeAgents(settings=settings, tokens=tokens, hub=hub)
        self._lock = asyncio.Lock()
        self._queued = 0  # transactions waiting for the lock
        self._wake = asyncio.Event()
        view = self.view
        # In this order: what agents reported first, then what follows from it.
        self.reconcilers: list[Reconciler] = [
            HeartbeatTimes(view=view, pace=self.pace),
            ReportedStarts(view=view),
            RunningTasks(view=view),
            LostHosts(view=view, pace=self.pace),
            FinishedJobs(),
            RestartedTasks(view=view),
            PendingJobs(view=view, wake=self.wake),
        ]

    def wake(self) -> None:
        """Ask for a reconcile pass now (a job was submitted, cancelled, an agent joined)."""
        self._wake.set()

    # --- the loop -------------------------------------------------------------------

    async def run(self) -> None:
        failures = 0
        last_pass, gap = -PASS_GAP_SECONDS, PASS_GAP_SECONDS
        while True:
            period = self.settings.reconcile_seconds
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period * random.uniform(0.8, 1.2)):
                    await self._wake.wait()
            # A burst of wake-ups (submissions, agents' starts) is taken in by one pass: a
            # pass per submission cost more than the submissions themselves.
            await asyncio.sleep(last_pass + gap - time.monotonic())
            last_pass = time.monotonic()
            self._wake.clear()
            try:
                held = await self.reconcile()
                failures = 0
                # Room for the changes that waited for the lock meanwhile, if any did.
                gap = max(PASS_GAP_SECONDS, PASS_GAP_FACTOR * held if self._queued else 0.0)
            except StaleDataError:
                log.info("a job changed during a reconcile pass; passing again")
                self.wake()
            except Exception:
                failures += 1
                log.exception("reconcile pass failed (%d in a row)", failures)
                await asyncio.sleep(min(30.0, period * 2**failures) * random.uniform(0.5, 1.0))

    async def reconcile(self) -> float:
        """One pass: every reconciler, in order, in one transaction. Returns the seconds it
        held the lock (the wait for it left out)."""
        began = time.perf_counter()
        try:
            async with self._transaction("pass") as tx:
                locked = time.perf_counter()
                for reconciler in self.reconcilers:
                    await reconciler.reconcile(tx)
            held = time.perf_counter() - locked
        except BaseException:
            self.view.capacity_changed()  # placed in memory, never committed
            raise
        finally:
            if self.monitor is not None:
                self.monitor.reconcile_seconds.observe(time.perf_counter() - began)
        self._send(tx.outbox)
        return held

    @contextlib.asynccontextmanager
    async def _transaction(self, holder: LockHolder) -> AsyncIterator[Transaction]:
        """Under the lock, a transaction that commits if the block ends normally; what it
        noted for after the commit is applied then. Its commands are the caller's to send."""
        self._queued += 1  # counted while it waits: a pass ending leaves it room
        try:
            await self._lock.acquire()
        finally:
            self._queued -= 1
        took = time.perf_counter()
        try:
            async with self.sessions() as session:
                tx = Transaction(session=session, backend=self.backend, monitor=self.monitor)
                yield tx
                await session.commit()
        finally:
            self._lock.release()
            if self.monitor is not None:
                held = time.perf_counter() - took
                self.monitor.lock_held_seconds.labels(by=holder).inc(held)
        for note in tx.after_commit:
            note()

    def _send(self, outbox: Outbox) -> None:
        """Send the commands of a committed transaction."""
        self.view.commanded(outbox.hosts())
        self.backend.send(outbox)

    # --- requests ---------------------------------------------------------------------

    async def apply(self, change: Change[T], *, frees_or_takes_capacity: bool = True) -> T:
        """Apply a change to jobs and tasks under the controller's lock, in its own
        transaction, and send the commands it decided once it has committed. A change that
        read a job which another writer changed before this commit is applied again."""
        result, tx = await self._committed("request", change, frees_or_takes_capacity)
        self._send(tx.outbox)
        self.wake()
        return result

    async def _committed(
        self, holder: LockHolder, change: Change[T], capacity: bool = False
    ) -> tuple[T, Transaction]:
        """`change` applied and committed, again on fresh state while a job it read changed
        under it (backend.scheduling.stale); its commands are the caller's to send."""

        async def attempt() -> tuple[T, Transaction]:
            if capacity:
                self.view.capacity_changed()
            async with self._transaction(holder) as tx:
                return await change(tx), tx

        return await applied_again_if_stale(attempt, f"a change by {holder}")

    # --- agent events ----------------------------------------------------------------

    async def on_hello(self, hello: Hello) -> list[ServerMessage]:
        """An agent (re)joined: record its host, take its news, and resynchronise it. Returns
        what to send it first, in order: the welcome, then its commands. Raises NameClash,
        changing nothing, if the host is online with another agent identity."""
        self.heard_from(hello.name)

        async def change(tx: Transaction) -> None:
            self.view.capacity_changed()  # its devices, and what it still runs, may differ
            host = await register_host(
                session=tx.session,
                name=hello.name,
                address=hello.address,
                port_range=hello.port_range,
                devices=[DeviceInfo(**d.model_dump()) for d in hello.devices],
                agent_version=hello.version,
                identity=hello.identity,
                engine=hello.engine,
            )
            # Starts it reported on its previous connection come before what it says now.
            await apply_reported_starts(tx, self.view, [hello.name])
            self.view.to_compare.pop(hello.name, None)
            for exit in hello.finished:
                await task_events.apply_exit(tx=tx, host=host, exit=exit)
            placed = (await placed_on(tx.session, [host.id])).get(host.id, {})
            agrees = await sync_running(tx, self.view, host, hello.running, placed, force=True)
            note_after_commit(tx, self.view, hello.name, hello.running, agrees)

        _, tx = await self._committed("agent", change)
        hub = self.backend.hub
        if self.pace.fleet_of(hub.count()):
            # The joining agent is told in its welcome; the others, not waiting for one, now.
            hub.send_all(HeartbeatPeriod(heartbeat_seconds=self.pace.seconds))
        first = tx.outbox.take(hello.name)  # after its welcome, on its own channel
        self._send(tx.outbox)
        self.wake()
        limit = self.settings.max_log_line_chars
        return [Welcome(heartbeat_seconds=self.pace.seconds, max_log_line_chars=limit), *first]

    async def forget_host(self, name: str, *, also: Change[object] | None = None) -> HostRead:
        """Release a host's name (`strata hosts forget`); hosts.service.forget_host says when
        it is refused. What the controller remembered about the host goes with it. `also`
        runs first in the same transaction (the audit trail's record of the request)."""
        hub = self.backend.hub

        async def change(tx: Transaction) -> HostRead:
            if also is not None:
                await also(tx)
            # Under the lock, which a joining agent's hello takes after it is attached:
            # either it is seen connected here, or it registers the host again afterwards.
            connected = hub.connection(name)
            return await forget_host(
                session=tx.session,
                name=name,
                connected_from=None if connected is None else connected.address,
            )

        forgotten = await self.apply(change)
        self.view.forget_host(name)
        return forgotten

    async def identity_clash(self, hello: Hello) -> str | None:
        """Why this hello may not take its host's name, if it may not (a read: no lock)."""
        async with self.sessions() as session:
            host = await find_host(session=session, name=hello.name)
            return identity_clash(host, hello.identity)

    def heard_from(self, host_name: str) -> None:
        """An agent's frame arrived: it is alive, whatever the controller is busy with."""
        self.view.heard_from(host_name)

    def on_heartbeat(
        self, host_name: str, running: list[RunningTask], keys: frozenset[TaskKey]
    ) -> None:
        """What an agent runs (`keys`: those of `running`, made once per list it sends)."""
        self.heard_from(host_name)
        # The heartbeat's time reaches the database with the next reconcile pass, for every
        # host in one statement. So does a comparison with the database, which a heartbeat
        # asks for only when what the agent runs changed, or while a start or stop it has
        # not answered yet may be due again; a settled host costs nothing here.
        view = self.view
        if view.running.same(host_name, keys):
            since = time.monotonic() - view.last_compared.get(host_name, 0.0)
            if host_name in view.settled or since < RESEND_SECONDS:
                return
        view.to_compare[host_name] = running
        self.wake()

    async def attempt_ran_on(self, host_name: str, key: TaskKey) -> bool:
        """Whether that host runs or ran this task attempt (a read: no lock needed)."""
        async with self.sessions() as session:
            host = await session.scalar(select(Host).where(Host.name == host_name))
            return host is not None and await task_events.attempt_ran_on(
                session=session, host=host, key=key
            )

    def on_task_started(
        self, host_name: str, key: TaskKey, pid: int, mode: StartMode | None = None
    ) -> None:
        """A task attempt an agent has started (warm or cold, if it says): applied by the
        next pass."""
        self.view.reported_starts.setdefault(host_name, []).append((key, pid))
        # A heartbeat that lists it is not asked to be compared for it: while ten thousand
        # tasks started, a comparison per host per start was most of the controller's work.
        self.view.running.started(host_name, key)
        if mode is not None:
            self.view.start_modes[key] = mode
        # A heartbeat waiting to be compared was sent before this start: comparing it after
        # the start is applied would take the task for one that has already gone.
        self.view.to_compare.pop(host_name, None)
        self.wake()

    async def on_task_exited(self, host_name: str, exit: TaskExit) -> None:
        """An attempt ended on that host: applied at once, not by the next pass."""

        async def change(tx: Transaction) -> None:
            self.view.capacity_changed()
            # Its starts, reported before this exit, are applied first; a heartbeat waiting
            # to be compared is older than the exit, and the next one says what runs now.
            await apply_reported_starts(tx, self.view, [host_name])
            self.view.to_compare.pop(host_name, None)
            host = await tx.session.scalar(select(Host).where(Host.name == host_name))
            if host is not None:
                await task_events.apply_exit(tx=tx, host=host, exit=exit)

        _, tx = await self._committed("agent", change)
        # Its port and GPUs are free now: a restarted attempt need not wait for the agent's
        # next heartbeat to be told so (see ClusterView.old_attempt_running).
        self.view.running.exited(host_name, exit.key)
        self._send(tx.outbox)
        self.wake()  # freed capacity may let a pending job in
