"""Where tasks run: the one interface between the reconcilers and whatever runs tasks.

The native agents (backend.scheduling.native) implement it today; another engine (a batch
scheduler's allocation with job-bound agents) plugs in here without touching the reconcilers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from agents.protocol import TaskKey
from backend.jobs.models import Job, Task
from backend.scheduling.placement import HostCapacity

if TYPE_CHECKING:
    from backend.scheduling.transaction import Outbox


class TaskBackend(Protocol):
    @property
    def changes(self) -> int:
        """Counts changes to which hosts are reachable: what was placed may fit differently."""
        ...

    async def capacities(self, session: AsyncSession) -> list[HostCapacity]:
        """What each host that can take tasks now has free."""
        ...

    def reachable(self, host: str) -> bool:
        """Whether commands can reach that host now."""
        ...

    def bound_job(self, host: str) -> int | None:
        """The job whose allocation this host's agent was started in (a Slurm job's nodes):
        only that job's tasks go there. None for hosts that take any job without one."""
        ...

    def leaving(self, host: str) -> None:
        """The host's agent said it is stopping: place nothing new there."""
        ...

    def start(self, outbox: Outbox, host: str, job: Job, task: Task, *, force: bool) -> None:
        """Decide to start the task's current attempt on the host (sent after commit)."""
        ...

    def stop(self, outbox: Outbox, host: str, key: TaskKey, reason: str, *, force: bool) -> None:
        """Decide to stop that attempt on the host (sent after commit)."""
        ...

    def send(self, outbox: Outbox) -> None:
        """Deliver what a committed transaction decided."""
        ...
