"""What agents report, applied through the controller: hello, heartbeats, starts and exits.

Each report that changes jobs or tasks is applied in the controller's transaction, under its
lock (Controller.committed), and its commands sent once it has committed; what only notes
something for the next pass goes into the controller's ClusterView. The controller does not
know this module: it is built beside it (backend.app).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from sqlalchemy import select

from agents.protocol import (
    HeartbeatPeriod,
    Hello,
    HostHealth,
    RunningTask,
    ServerMessage,
    TaskExit,
    TaskKey,
    Welcome,
)
from backend.cluster.service import DeviceInfo, find_host, forget_host, register_host
from backend.hosts.models import Host
from backend.hosts.names import admit_hello
from backend.hosts.schemas import HostRead
from backend.scheduling import task_events
from backend.scheduling.cluster import StartMode
from backend.scheduling.comparison import (
    note_after_commit,
    placed_on,
    sync_running,
)
from backend.scheduling.controller import Change, Controller
from backend.scheduling.hub import AgentHub
from backend.scheduling.native import RESEND_SECONDS
from backend.scheduling.start_reports import apply_reported_starts
from backend.scheduling.transaction import Transaction

# Of an agent's notice, left for stopping the tasks once their checkpoints are written.
NOTICE_MARGIN_SECONDS = 5.0


class AgentReports:
    def __init__(self, *, controller: Controller, hub: AgentHub) -> None:
        self.controller = controller
        self.hub = hub  # the connected agents: a fleet's new heartbeat period goes to them
        self.sessions = controller.sessions  # for reads that need no lock
        self.view = controller.view
        self.pace = controller.pace

    async def admit(self, hello: Hello) -> str | None:
        """Why this hello may not take its host's name, if it may not (a read: no lock).
        One name, one host: an agent with another identity may not take a name in use,
        whether its agent is connected (the hub) or between connections (the host's row,
        online). The hello checks the row again under the controller's lock, and the hub
        checks the connected agent again at the attach."""

        def connected_elsewhere() -> str | None:
            connected = self.hub.connection(hello.name)
            return admit_hello(hello.name, hello.identity, connected=connected)

        return (
            connected_elsewhere()
            or await self.stored_clash(hello)
            or connected_elsewhere()  # again: an agent may have joined during the read
        )

    async def stored_clash(self, hello: Hello) -> str | None:
        """Why the host's row keeps this hello from its name, if it does (a read: no lock)."""
        async with self.sessions() as session:
            host = await find_host(session=session, name=hello.name)
            return admit_hello(hello.name, hello.identity, host=host)

    async def on_hello(self, hello: Hello) -> list[ServerMessage]:
        """An agent (re)joined: record its host, take its news, and resynchronise it. Returns
        what to send it first, in order: the welcome, then its commands. Raises NameClash,
        changing nothing, if the host is online with another agent identity."""
        self.heard_from(hello.name)
        view = self.view

        async def change(tx: Transaction) -> None:
            view.capacity_changed()  # its devices, and what it still runs, may differ
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
            await apply_reported_starts(tx, view, [hello.name])
            view.to_compare.pop(hello.name, None)
            for exit in hello.finished:
                await task_events.apply_exit(tx=tx, host=host, exit=exit)
            placed = (await placed_on(tx.session, [host.id])).get(host.id, {})
            agrees = await sync_running(tx, view, host, hello.running, placed, force=True)
            note_after_commit(tx, view, hello.name, hello.running, agrees)

        _, tx = await self.controller.committed("agent", change)
        if self.pace.fleet_of(self.hub.count()):
            # The joining agent is told in its welcome; the others, not waiting for one, now.
            self.hub.send_all(HeartbeatPeriod(heartbeat_seconds=self.pace.seconds))
        first = tx.outbox.take(hello.name)  # after its welcome, on its own channel
        self.controller.send(tx.outbox)
        self.controller.wake()
        limit = self.controller.settings.max_log_line_chars
        return [Welcome(heartbeat_seconds=self.pace.seconds, max_log_line_chars=limit), *first]

    async def forget_host(self, name: str, *, also: Change[object] | None = None) -> HostRead:
        """Release a host's name (`strata hosts forget`); cluster.service.forget_host says when
        it is refused. What the controller remembered about the host goes with it. `also`
        runs first in the same transaction (the audit trail's record of the request)."""

        async def change(tx: Transaction) -> HostRead:
            if also is not None:
                await also(tx)
            # Under the lock, which a joining agent's hello takes after it is attached:
            # either it is seen connected here, or it registers the host again afterwards.
            connected = self.hub.connection(name)
            return await forget_host(
                session=tx.session,
                name=name,
                connected_from=None if connected is None else connected.address,
            )

        forgotten = await self.controller.apply(change)
        self.view.forget_host(name)
        self.controller.health.forget(name)
        return forgotten

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
        self.controller.wake()

    def on_health(self, host_name: str, health: HostHealth) -> None:
        """What the host's probes found: noted in memory, and applied by the next pass only
        when it differs from what it found before."""
        if self.controller.health.report(host_name, health):
            self.controller.wake()

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
        # A heartbeat that lists it is not asked to be compared for it: a comparison per host
        # per start would swamp the controller while many tasks start.
        self.view.running.started(host_name, key)
        if mode is not None:
            self.view.start_modes[key] = mode
        # A heartbeat waiting to be compared was sent before this start: comparing it after
        # the start is applied would take the task for one that has already gone.
        self.view.to_compare.pop(host_name, None)
        self.controller.wake()

    async def on_leaving(
        self,
        host_name: str,
        notice_seconds: float,
        why: str = "its agent was told to stop",
        record: Callable[[Transaction], Awaitable[None]] | None = None,
    ) -> None:
        """The host goes in `notice_seconds` (its agent is stopping, or a notice came for
        it: `record` writes that change's audit entry): nothing new goes there, and each
        job with tasks there is interrupted (checkpointed, then placed again elsewhere)
        before the agent stops them itself, a little before its notice is up."""

        async def change(tx: Transaction) -> dict[int, frozenset[task_events.TaskAttempt]]:
            if record is not None:
                await record(tx)
            tx.agents.leaving(host_name)
            return await task_events.jobs_on(tx.session, host_name)

        jobs, tx = await self.controller.committed("agent", change)
        self.controller.send(tx.outbox)
        deadline = max(1.0, notice_seconds - NOTICE_MARGIN_SECONDS)
        for job_id, attempts in jobs.items():
            self.controller.interrupter.vacate(
                job_id,
                host_name,
                attempts,
                deadline,
                why=f"{host_name} is leaving ({why})",
                cause="notice",
            )

    async def on_task_exited(self, host_name: str, exit: TaskExit) -> None:
        """An attempt ended on that host: applied at once, not by the next pass."""
        view = self.view

        async def change(tx: Transaction) -> None:
            view.capacity_changed()
            # Its starts, reported before this exit, are applied first; a heartbeat waiting
            # to be compared is older than the exit, and the next one says what runs now.
            await apply_reported_starts(tx, view, [host_name])
            view.to_compare.pop(host_name, None)
            host = await tx.session.scalar(select(Host).where(Host.name == host_name))
            if host is not None:
                await task_events.apply_exit(tx=tx, host=host, exit=exit)

        _, tx = await self.controller.committed("agent", change)
        # Its port and GPUs are free now: a restarted attempt need not wait for the agent's
        # next heartbeat to be told so (see ClusterView.old_attempt_running).
        view.running.exited(host_name, exit.key)
        self.controller.send(tx.outbox)
        self.controller.wake()  # freed capacity may let a pending job in
