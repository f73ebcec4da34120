"""Native agents as the place tasks run: one websocket per host, start and stop commands.

Commands are decided inside a transaction and sent once it commits; an unanswered start or
stop is sent again after RESEND_SECONDS, never sooner unless forced.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agents.protocol import StartTask, StopTask, TaskKey
from backend.auth import TokenRegistry
from backend.config import Settings
from backend.hosts.models import Device, Host
from backend.hosts.states import HostStatus
from backend.jobs.models import Job, Task
from backend.jobs.states import LIVE_TASK_STATUSES
from backend.scheduling.hub import AgentHub
from backend.scheduling.launch import JobLaunch
from backend.scheduling.outbox import CommandOutbox
from backend.scheduling.placement import HostCapacity

RESEND_SECONDS = 5.0  # how long an unanswered start or stop waits before it is sent again


class NativeAgents:
    """The agents tasks run on (`Agents`): hosts that run Strata's own agent, a websocket each."""

    def __init__(self, *, settings: Settings, tokens: TokenRegistry, hub: AgentHub) -> None:
        self.settings = settings
        self.tokens = tokens
        self.hub = hub
        self._sent: dict[tuple[str, TaskKey], float] = {}
        self._prune_above = 1024
        # The last job's launch, by its id, its spec object and the checkpoint root.
        self._last_launch: tuple[int, object, Path, JobLaunch] | None = None
        self._resolved_checkpoints: tuple[tuple[object, object], Path] | None = None

    @property
    def changes(self) -> int:
        return self.hub.changes

    def reachable(self, host: str) -> bool:
        return self.hub.connected(host)

    def bound_job(self, host: str) -> int | None:
        return self.hub.bound_job(host)

    def leaving(self, host: str) -> None:
        self.hub.mark_leaving(host)

    def due(self, outbox: CommandOutbox, kind: str, key: TaskKey, *, force: bool = False) -> bool:
        """Whether a command of this kind for this attempt may be decided in this outbox's
        transaction: not twice in one, nor within RESEND_SECONDS of when it was last sent
        unless forced. Only `send` notes a command as sent: decided in a transaction that
        rolled back, it was never sent, and the change applied again must send it."""
        if (kind, key) in outbox.commands:
            return False
        last = self._sent.get((kind, key), -RESEND_SECONDS)
        return force or time.monotonic() - last >= RESEND_SECONDS

    def sent(self, commands: Iterable[tuple[str, TaskKey]]) -> None:
        """Note these commands as sent now: they are not due again for RESEND_SECONDS."""
        now = time.monotonic()
        for command in commands:
            self._sent[command] = now
        if len(self._sent) > self._prune_above:
            # Entries older than the resend period decide nothing: without this the map
            # kept every command ever sent.
            self._sent = {k: t for k, t in self._sent.items() if now - t < RESEND_SECONDS}
            self._prune_above = max(1024, 2 * len(self._sent))

    def start(
        self, outbox: CommandOutbox, host: str, job: Job, task: Task, *, force: bool = False
    ) -> None:
        if self.due(outbox, "start", task.key, force=force):
            outbox.add(host, self.start_message(job, task), command=("start", task.key))

    def start_message(self, job: Job, task: Task) -> StartTask:
        assert task.port is not None and task.tf_config is not None
        return self._launch(job).start_message(
            key=task.key, port=task.port, gpus=list(task.gpu_indices), tf_config=task.tf_config
        )

    def _launch(self, job: Job) -> JobLaunch:
        """What the job's start messages share, once for all its tasks (its spec validated,
        its token signed). A job's spec never changes."""
        checkpoints = self._checkpoints()
        cached = self._last_launch
        # The same spec object, not merely an equal one: specs are not compared.
        if (
            cached is not None
            and cached[0] == job.id
            and cached[1] is job.spec
            and cached[2] == checkpoints
        ):
            return cached[3]
        launch = JobLaunch.of(
            spec=job.job_spec,
            job_id=job.id,
            task_token=self.tokens.task_token(job.id),
            checkpoint_root=checkpoints,
            hang_timeout=self.settings.hang_timeout,
        )
        self._last_launch = (job.id, job.spec, checkpoints, launch)
        return launch

    def _checkpoints(self) -> Path:
        """Settings.checkpoints, resolved once per configured value rather than for every
        start message (resolving a path touches the filesystem)."""
        configured = (self.settings.checkpoint_root, self.settings.data_dir)
        if self._resolved_checkpoints is None or self._resolved_checkpoints[0] != configured:
            self._resolved_checkpoints = (configured, self.settings.checkpoints)
        return self._resolved_checkpoints[1]

    def stop(
        self, outbox: CommandOutbox, host: str, key: TaskKey, reason: str, *, force: bool = False
    ) -> None:
        if self.due(outbox, "stop", key, force=force):
            grace = self.settings.stop_grace_seconds
            message = StopTask(key=key, grace_seconds=grace, reason=reason)
            outbox.add(host, message, command=("stop", key))

    def send(self, outbox: CommandOutbox) -> None:
        """Send what a committed transaction decided (messages taken out of its outbox to be
        sent by the caller are noted as sent too)."""
        self.sent(outbox.commands)
        for host, message in outbox.messages:
            self.hub.send(host, message)

    async def capacities(self, session: AsyncSession) -> list[HostCapacity]:
        """What each connected online host has free. Read as plain rows, not ORM objects: a
        thousand hosts, their eight thousand devices and ten thousand live tasks, each pass
        that has a job to place."""
        hosts = [
            row
            for row in await session.execute(
                select(
                    Host.id,
                    Host.name,
                    Host.address,
                    Host.port_range_start,
                    Host.port_range_end,
                    Host.engine,
                ).where(
                    Host.status == HostStatus.online,
                    Host.draining_since.is_(None),
                    Host.cordoned_at.is_(None),  # drained or cordoned: nothing new goes there
                )
            )
            if self.hub.takes_tasks(row.name)
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
                container_engine=h.engine is not None,
                images=frozenset((h.engine or {}).get("images") or ()),
            )
            for h in hosts
        ]
