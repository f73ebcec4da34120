"""Where tasks run: the one interface between the reconcilers and whatever runs tasks.

Two parts. `Agents` is the command path: the agents every task runs on (native hosts, and
the agents started in a batch scheduler's allocation), implemented by
backend.scheduling.native. An `Executor` answers for one kind of job: which hosts may take
it and how project quotas count it. `Executors` chooses one per job: the first that takes
the job's spec, else the native one. Another executor (backend.slurm.executor) is built by
the server's assembly and handed in; the reconcilers never name it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncSession

from agents.protocol import TaskKey
from backend.jobs.models import Job, Task
from backend.jobs.spec import JobSpec
from backend.scheduling.placement import HostCapacity

if TYPE_CHECKING:
    from backend.scheduling.outbox import CommandOutbox


class Agents(Protocol):
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

    def start(self, outbox: CommandOutbox, host: str, job: Job, task: Task, *, force: bool) -> None:
        """Decide to start the task's current attempt on the host (sent after commit)."""
        ...

    def stop(
        self, outbox: CommandOutbox, host: str, key: TaskKey, reason: str, *, force: bool
    ) -> None:
        """Decide to stop that attempt on the host (sent after commit)."""
        ...

    def send(self, outbox: CommandOutbox) -> None:
        """Deliver what a committed transaction decided."""
        ...


@dataclass
class PassHosts:
    """The hosts with room, as one placement pass sees them, sorted once for all its jobs."""

    unbound: list[HostCapacity]  # take any job that has no allocation of its own
    bound: dict[int, list[HostCapacity]] = field(default_factory=dict)  # by allocation's job

    @classmethod
    def of(cls, capacity: list[HostCapacity], agents: Agents) -> PassHosts:
        hosts = cls(unbound=[])
        for host in capacity:
            job_id = agents.bound_job(host.name)
            if job_id is None:
                hosts.unbound.append(host)
            else:
                hosts.bound.setdefault(job_id, []).append(host)
        return hosts


class Executor(Protocol):
    def takes(self, spec: JobSpec) -> bool:
        """Whether jobs of this spec are this executor's."""
        ...

    def hosts_for(self, job_id: int, spec: JobSpec, hosts: PassHosts) -> list[HostCapacity] | None:
        """The hosts the job's tasks may go on, or None while it must wait for hosts of its
        own (its reason is then the executor's to give, not placement's)."""
        ...

    @property
    def counts_gpus(self) -> bool:
        """Whether its jobs count, and wait, under their project's GPU quota."""
        ...

    def uncounted_jobs(self) -> Select[tuple[int]] | None:
        """The ids of the jobs whose tasks project GPU quotas leave out, as a query (None:
        it leaves none out)."""
        ...


class NativeExecutor:
    """Jobs on any host that has no allocation of its own; held by project GPU quotas."""

    counts_gpus = True

    def takes(self, spec: JobSpec) -> bool:
        return True

    def hosts_for(self, job_id: int, spec: JobSpec, hosts: PassHosts) -> list[HostCapacity] | None:
        return hosts.unbound

    def uncounted_jobs(self) -> Select[tuple[int]] | None:
        return None


class Executors:
    """This server's executors, over the agents every one of them runs tasks on."""

    def __init__(self, *, agents: Agents, others: Sequence[Executor] = ()) -> None:
        self.agents = agents
        self.native: Executor = NativeExecutor()
        self.others = list(others)

    def for_job(self, spec: JobSpec) -> Executor:
        return next((e for e in self.others if e.takes(spec)), self.native)

    def uncounted_jobs(self) -> list[Select[tuple[int]]]:
        """What project GPU quotas leave out, as queries of job ids."""
        queries = (e.uncounted_jobs() for e in [self.native, *self.others])
        return [q for q in queries if q is not None]
