"""The controller: turns the difference between desired and actual state into commands.

Level-triggered, like a Kubernetes controller. The database holds what should run; agents
report what does run (in hello and heartbeats) and what exited. A pass runs the reconcilers
(backend.scheduling.reconcilers) in one transaction; requests and agent reports
(backend.scheduling.agent_reports, which uses `committed` and `send`) are applied the same
way. Where tasks run is the executors it is given (backend.scheduling.executors). Every
change to jobs and tasks goes through this class, under one lock, and jobs are versioned: a
change that read a job another writer has changed since is applied again on fresh state, so
an acknowledged request is never undone by something concurrent.

Only the replica that leads (backend.leadership) passes and applies changes, each fenced by
its lease's epoch: followers forward requests, agents and runtimes to it (backend.api.forwarding).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from backend.config import Settings
from backend.errors import Unavailable
from backend.leadership.lease import Lease, NotLeader, SoleLeader
from backend.monitoring.instruments import ServerMetrics
from backend.scheduling.cluster import ClusterView
from backend.scheduling.executors import Executors
from backend.scheduling.health_notes import HealthNotes
from backend.scheduling.interruptions import Interrupter
from backend.scheduling.outbox import CommandOutbox
from backend.scheduling.pace import HeartbeatPace
from backend.scheduling.reconcilers import Reconciler
from backend.scheduling.reconcilers.drains import Drains
from backend.scheduling.reconcilers.finished_jobs import FinishedJobs
from backend.scheduling.reconcilers.hangs import Hangs
from backend.scheduling.reconcilers.heartbeat_times import HeartbeatTimes
from backend.scheduling.reconcilers.host_health import HostHealthChecks
from backend.scheduling.reconcilers.idle_clients import IdleClients
from backend.scheduling.reconcilers.lost_hosts import LostHosts
from backend.scheduling.reconcilers.pending_jobs import PendingJobs
from backend.scheduling.reconcilers.preemptions import Preemptions
from backend.scheduling.reconcilers.reported_starts import ReportedStarts
from backend.scheduling.reconcilers.restarted_tasks import RestartedTasks
from backend.scheduling.reconcilers.running_tasks import RunningTasks
from backend.scheduling.reconcilers.stragglers import CpuPercent, Stragglers
from backend.scheduling.runtime_links import RuntimeLinks
from backend.scheduling.stale import applied_again_if_stale
from backend.scheduling.transaction import Transaction
from backend.streams.progress import ProgressBoard
from backend.streams.throughput import ThroughputBoard

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
        executors: Executors,
        links: RuntimeLinks | None = None,
        monitor: ServerMetrics | None = None,
        progress: ProgressBoard | None = None,
        throughput: ThroughputBoard | None = None,
        cpu: CpuPercent | None = None,
        lease: Lease | None = None,
    ) -> None:
        self.settings = settings
        self.lease: Lease = lease or SoleLeader()  # passes run while it leads
        self.monitor = monitor  # times passes; transactions record what they decided
        self.sessions = sessions
        self.view = ClusterView()
        # Hosts' health reports and infrastructure failures, noted for the next pass.
        self.health = HealthNotes(clock_limit=settings.host_clock_offset_seconds)
        self.pace = HeartbeatPace.from_settings(settings)
        self.executors = executors  # where tasks run: its agents send what passes decide
        self._lock = asyncio.Lock()
        self._queued = 0  # transactions waiting for the lock
        self._wake = asyncio.Event()
        view = self.view
        self.stragglers = Stragglers(
            board=throughput or ThroughputBoard(settings.straggler_window_seconds),
            settings=settings,
            cpu=cpu,
        )
        # Interruptions a pass decides wait for their checkpoints outside it.
        self.interrupter = Interrupter(
            sessions=sessions,
            links=links or RuntimeLinks(),
            apply=self.apply,
            deadline=settings.interruption_deadline_seconds,
        )
        # In this order: what agents reported first, then what follows from it.
        self.reconcilers: list[Reconciler] = [
            HeartbeatTimes(view=view, pace=self.pace),
            ReportedStarts(view=view),
            RunningTasks(view=view),
            LostHosts(view=view, pace=self.pace),
            HostHealthChecks(notes=self.health, view=view, settings=settings),
            IdleClients(settings=settings),
            Hangs(board=progress or ProgressBoard(), settings=settings),
            self.stragglers,
            FinishedJobs(),
            RestartedTasks(view=view),
            PendingJobs(view=view, wake=self.wake),
            Preemptions(view=view, settings=settings, interrupter=self.interrupter),
            Drains(interrupter=self.interrupter, deadline=settings.interruption_deadline_seconds),
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
            # A burst of wake-ups (submissions, agents' starts) is taken in by one pass: each
            # pass has fixed queries, which one pass per submission would repeat.
            await asyncio.sleep(last_pass + gap - time.monotonic())
            last_pass = time.monotonic()
            self._wake.clear()
            if not self.lease.is_leader:
                continue  # a follower passes nothing; the keeper wakes it when it leads
            try:
                held = await self.reconcile()
                failures = 0
                # Room for the changes that waited for the lock meanwhile, if any did.
                gap = max(PASS_GAP_SECONDS, PASS_GAP_FACTOR * held if self._queued else 0.0)
            except NotLeader as exc:
                log.warning("a reconcile pass wrote nothing: %s", exc)
            except StaleDataError:
                log.info("a job changed during a reconcile pass; passing again")
                self.wake()
            except Exception:
                failures += 1
                log.exception("reconcile pass failed (%d in a row)", failures)
                await asyncio.sleep(min(30.0, period * 2**failures) * random.uniform(0.5, 1.0))

    async def reconcile(self) -> float:
        """One pass: every reconciler, in order, in one transaction fenced by the lease
        (NotLeader: it wrote nothing). Returns the seconds it held the lock (the wait for it
        left out)."""
        began = time.perf_counter()
        try:
            async with self._transaction("pass") as tx:
                locked = time.perf_counter()
                await self.lease.fence(tx.session)
                for reconciler in self.reconcilers:
                    await reconciler.reconcile(tx)
            held = time.perf_counter() - locked
        except BaseException:
            self.view.capacity_changed()  # placed in memory, never committed
            raise
        finally:
            if self.monitor is not None:
                self.monitor.reconcile_seconds.observe(time.perf_counter() - began)
        self.send(tx.outbox)
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
                tx = Transaction(
                    session=session,
                    executors=self.executors,
                    monitor=self.monitor,
                    health=self.health,
                )
                yield tx
                await session.commit()
        finally:
            self._lock.release()
            if self.monitor is not None:
                held = time.perf_counter() - took
                self.monitor.lock_held_seconds.labels(by=holder).inc(held)
        for note in tx.after_commit:
            note()

    def send(self, outbox: CommandOutbox) -> None:
        """Send the commands of a committed transaction."""
        self.view.commanded(outbox.hosts())
        self.executors.agents.send(outbox)

    # --- requests ---------------------------------------------------------------------

    async def apply(self, change: Change[T], *, frees_or_takes_capacity: bool = True) -> T:
        """Apply a change to jobs and tasks under the controller's lock, in its own
        transaction, and send the commands it decided once it has committed. A change that
        read a job which another writer changed before this commit is applied again."""
        result, tx = await self.committed("request", change, frees_or_takes_capacity)
        self.send(tx.outbox)
        self.wake()
        return result

    async def committed(
        self, holder: LockHolder, change: Change[T], capacity: bool = False
    ) -> tuple[T, Transaction]:
        """`change` applied and committed, again on fresh state while a job it read changed
        under it (backend.scheduling.stale); its commands are the caller's to send."""

        async def attempt() -> tuple[T, Transaction]:
            if capacity:
                self.view.capacity_changed()
            async with self._transaction(holder) as tx:
                try:
                    await self.lease.fence(tx.session)
                except NotLeader as exc:  # followers forward: this one just lost the lease
                    raise Unavailable(f"{exc}; retry") from exc
                return await change(tx), tx

        return await applied_again_if_stale(attempt, f"a change by {holder}")
