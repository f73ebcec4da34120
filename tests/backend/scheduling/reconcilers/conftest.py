"""A world for one reconciler at a time: a real database (SQLite and PostgreSQL), a cluster
view, and the executors over native agents on a fake hub that records what would be sent.
No sockets, no processes."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import selectinload

from agents.protocol import ServerMessage
from agents.runtime_environment import EngineInfo
from backend.auth import TokenKind, TokenRegistry
from backend.config import Settings
from backend.db import create_engine, session_factory
from backend.hosts.models import Host
from backend.jobs.models import Job, Task
from backend.jobs.spec import JobSpec
from backend.jobs.states import JobStatus
from backend.migrate import upgrade_database
from backend.scheduling.cluster import ClusterView
from backend.scheduling.executors import Executors
from backend.scheduling.hub import AgentHub
from backend.scheduling.lifecycle import transition_job
from backend.scheduling.native import NativeAgents
from backend.scheduling.outbox import CommandOutbox
from backend.scheduling.pace import HeartbeatPace
from backend.scheduling.reconcilers import Reconciler
from backend.scheduling.reconcilers.pending_jobs import PendingJobs
from backend.scheduling.reconcilers.reported_starts import ReportedStarts
from backend.scheduling.transaction import Transaction
from backend.slurm.executor import SlurmExecutor
from tests.conftest import make_settings
from tests.support.factories import create_job, make_host, make_spec


class FakeHub(AgentHub):
    """Hosts named as connected; messages recorded instead of sent."""

    def __init__(self, connected: set[str]) -> None:
        super().__init__()
        self.names = connected
        self.sent: list[tuple[str, ServerMessage]] = []
        self.bound: dict[str, int] = {}  # hosts of a Slurm job's allocation: their job
        self.stopping: set[str] = set()  # hosts whose agent said it is stopping

    def connected(self, host_name: str) -> bool:
        return host_name in self.names

    def takes_tasks(self, host_name: str) -> bool:
        return host_name in self.names and host_name not in self.stopping

    def mark_leaving(self, host_name: str) -> None:
        self.stopping.add(host_name)

    def bound_job(self, host_name: str) -> int | None:
        return self.bound.get(host_name)

    def count(self) -> int:
        return len(self.names)

    def send(self, host_name: str, message: ServerMessage) -> bool:
        self.sent.append((host_name, message))
        return True


@dataclass
class World:
    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    hub: FakeHub
    agents: NativeAgents
    view: ClusterView = field(default_factory=ClusterView)

    @functools.cached_property
    def executors(self) -> Executors:
        """As the server has them: Slurm's rules hold with Slurm off too (backend.app)."""
        return Executors(agents=self.agents, others=[SlurmExecutor()])

    @functools.cached_property
    def pace(self) -> HeartbeatPace:
        return HeartbeatPace.from_settings(self.settings)

    async def run(self, reconciler: Reconciler) -> CommandOutbox:
        """One reconciler in its own transaction, committed, its notes applied and its
        commands sent (to the fake hub), as the controller does."""
        async with self.sessions() as session:
            tx = Transaction(session=session, executors=self.executors)
            await reconciler.reconcile(tx)
            await session.commit()
        for note in tx.after_commit:
            note()
        self.agents.send(tx.outbox)
        return tx.outbox

    async def host(
        self, name: str = "host-a", gpus: int = 2, engine: EngineInfo | None = None
    ) -> Host:
        async with self.sessions() as session:
            host = await make_host(session, name, gpus=gpus, engine=engine)
            await session.commit()
        self.hub.names.add(name)
        return host

    async def job(self, base: str = "mirrored", /, **overrides: object) -> int:
        spec = JobSpec.model_validate(make_spec(base, **overrides))
        async with self.sessions() as session:
            job = await create_job(session=session, spec=spec)
            await session.commit()
            return job.id

    async def placed(self, base: str = "mirrored", /, **overrides: object) -> Job:
        """A job placed by PendingJobs (scheduled; its start commands dropped)."""
        job_id = await self.job(base, **overrides)
        await self.run(PendingJobs(view=self.view, wake=lambda: None))
        job = await self.load(job_id)
        assert job.status is JobStatus.scheduled, job.reason
        return job

    async def running(self, base: str = "mirrored", /, **overrides: object) -> Job:
        """A placed job whose agents reported every task started."""
        job = await self.placed(base, **overrides)
        for task in job.tasks:
            assert task.host is not None
            self.view.reported_starts.setdefault(task.host.name, []).append((task.key, 100))
        await self.run(ReportedStarts(view=self.view))
        job = await self.load(job.id)
        assert job.status is JobStatus.running, job.reason
        return job

    async def set_task(self, task_id: int, **values: object) -> None:
        async with self.sessions() as session:
            task = await session.get_one(Task, task_id)
            for name, value in values.items():
                setattr(task, name, value)
            await session.commit()

    async def set_job_status(self, job_id: int, status: JobStatus) -> None:
        async with self.sessions() as session:
            job = await session.get_one(Job, job_id)
            await transition_job(session=session, job=job, to=status, reason="by hand")
            await session.commit()

    async def load(self, job_id: int) -> Job:
        async with self.sessions() as session:
            job = await session.scalar(
                select(Job)
                .where(Job.id == job_id)
                .options(selectinload(Job.tasks).joinedload(Task.host))
            )
            assert job is not None
            return job


@pytest.fixture
async def world(database_url: str, tmp_path: Path) -> AsyncIterator[World]:
    settings = make_settings(database_url, tmp_path / "data")
    engine = create_engine(settings.resolved_database_url)
    await upgrade_database(engine)
    hub = FakeHub(set())
    tokens = TokenRegistry(
        {TokenKind.admin: settings.api_token, TokenKind.agent: settings.agent_token}
    )
    try:
        yield World(
            settings=settings,
            sessions=session_factory(engine),
            hub=hub,
            agents=NativeAgents(settings=settings, tokens=tokens, hub=hub),
        )
    finally:
        await engine.dispose()
