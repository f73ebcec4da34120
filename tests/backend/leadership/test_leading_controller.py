"""Only the leading replica's controller passes: two controllers on one PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from backend.auth import TokenKind, TokenRegistry
from backend.config import async_database_url
from backend.db import create_engine, session_factory
from backend.jobs.models import Job
from backend.jobs.spec import JobSpec
from backend.leadership.lease import LeaseKeeper, NotLeader
from backend.scheduling.controller import Controller
from backend.scheduling.executors import Executors
from backend.scheduling.hub import AgentHub
from backend.scheduling.native import NativeAgents
from tests.conftest import make_settings
from tests.support.factories import create_job, make_spec

pytestmark = pytest.mark.postgres


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(async_database_url(postgres_url))
    yield engine
    await engine.dispose()


class CountedController(Controller):
    passes = 0

    async def reconcile(self) -> float:
        self.passes += 1
        return await super().reconcile()


def controller(engine: AsyncEngine, keeper: LeaseKeeper, tmp_path: Path) -> CountedController:
    settings = make_settings("postgresql://unused/", tmp_path, reconcile_seconds=0.05)
    tokens = TokenRegistry({TokenKind.admin: settings.api_token, TokenKind.agent: None})
    agents = NativeAgents(settings=settings, tokens=tokens, hub=AgentHub())
    return CountedController(
        settings=settings,
        sessions=session_factory(engine),
        executors=Executors(agents=agents),
        lease=keeper,
    )


async def pending_job(engine: AsyncEngine) -> int:
    async with async_sessionmaker(engine, expire_on_commit=False)() as session:
        job = await create_job(session=session, spec=JobSpec.model_validate(make_spec()))
        await session.commit()
        return job.id


async def reason_of(engine: AsyncEngine, job_id: int) -> str | None:
    async with async_sessionmaker(engine)() as session:
        return (await session.get_one(Job, job_id)).reason


def frozen() -> float:
    return 0.0  # a clock that stands still: a paused process believes its lease fresh


async def test_only_the_leaders_pass_writes(engine: AsyncEngine, tmp_path: Path) -> None:
    # A replica paused while it led: by its own clock it still leads, but the same replica,
    # restarted, has taken the lease back with a new epoch.
    paused = LeaseKeeper(engine=engine, replica="a" * 16, ttl=30.0, clock=frozen)
    assert await paused.tick()
    leading = LeaseKeeper(engine=engine, replica="a" * 16, ttl=30.0)
    following = LeaseKeeper(engine=engine, replica="b" * 16, ttl=30.0)
    assert await leading.tick() and not await following.tick()
    assert paused.is_leader
    leader = controller(engine, leading, tmp_path / "a")
    job_id = await pending_job(engine)
    queued = await reason_of(engine, job_id)

    for refused in (following, paused):  # their passes are refused, and write nothing
        with pytest.raises(NotLeader):
            await controller(engine, refused, tmp_path / "b").reconcile()
        assert await reason_of(engine, job_id) == queued
    assert not paused.is_leader  # it stepped down

    await leader.reconcile()  # the leader's pass finds no host for the job, and says so
    assert await reason_of(engine, job_id) not in (None, queued)


async def test_a_followers_loop_runs_no_pass(engine: AsyncEngine, tmp_path: Path) -> None:
    leading = LeaseKeeper(engine=engine, replica="a" * 16, ttl=30.0)
    following = LeaseKeeper(engine=engine, replica="b" * 16, ttl=30.0)
    assert await leading.tick() and not await following.tick()
    leader = controller(engine, leading, tmp_path / "a")
    follower = controller(engine, following, tmp_path / "b")
    loops = [asyncio.create_task(c.run()) for c in (leader, follower)]
    try:
        for _ in range(400):
            if leader.passes >= 5:
                break
            follower.wake()
            await asyncio.sleep(0.025)
    finally:
        for loop in loops:
            loop.cancel()
        for loop in loops:
            with contextlib.suppress(asyncio.CancelledError):
                await loop
    assert leader.passes >= 5  # the loops ran, and the leader's passed
    assert follower.passes == 0
