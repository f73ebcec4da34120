"""The lease on real PostgreSQL: two keepers on one database, as two replicas would be."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from backend.config import async_database_url
from backend.db import create_engine
from backend.leadership.lease import LeaseKeeper, NotLeader
from backend.leadership.models import Leadership

pytestmark = pytest.mark.postgres


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(async_database_url(postgres_url))
    yield engine
    await engine.dispose()


def frozen() -> float:
    """A clock that stands still: the replica believes its lease fresh, as one paused
    between its own check and its write would."""
    return 0.0


async def lease_row(engine: AsyncEngine) -> Leadership:
    async with engine.connect() as connection:
        row = (await connection.execute(select(Leadership))).one()
    return Leadership(**row._asdict())


async def until_leader(keeper: LeaseKeeper, tries: int = 400) -> None:
    for _ in range(tries):
        if await keeper.tick():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"{keeper.replica} never took the lease")


async def test_one_leads_and_the_other_takes_over_only_after_expiry(engine: AsyncEngine) -> None:
    a = LeaseKeeper(engine=engine, replica="a" * 16, ttl=1.0)
    b = LeaseKeeper(engine=engine, replica="b" * 16, ttl=1.0)
    assert await a.tick() and a.is_leader and a.epoch == 1
    assert not await b.tick() and not b.is_leader and b.epoch is None
    held = await lease_row(engine)
    assert (held.holder, held.epoch) == (a.replica, 1)

    await until_leader(b)  # a renews no more
    taken = await lease_row(engine)
    assert (taken.holder, taken.epoch) == (b.replica, 2)
    # By the database's clock, not before a's lease had expired.
    assert taken.renewed_at >= held.expires_at
    assert b.epoch == 2 and b.changes == 1

    assert not await a.tick()  # a's renewal is refused: it steps down
    assert not a.is_leader and a.changes == 2
    assert (await lease_row(engine)).holder == b.replica


async def test_renewals_keep_the_epoch(engine: AsyncEngine) -> None:
    a = LeaseKeeper(engine=engine, replica="a" * 16, ttl=30.0)
    assert await a.tick()
    first = await lease_row(engine)
    assert await a.tick() and await a.tick()
    renewed = await lease_row(engine)
    assert renewed.epoch == first.epoch == a.epoch
    assert renewed.expires_at > first.expires_at
    assert a.changes == 1


async def test_a_restarted_replica_takes_its_own_lease_back_at_once(engine: AsyncEngine) -> None:
    before = LeaseKeeper(engine=engine, replica="a" * 16, ttl=60.0, clock=frozen)
    assert await before.tick()
    # The same replica id in a new process: its lease has a minute left, and is taken at once.
    after = LeaseKeeper(engine=engine, replica="a" * 16, ttl=60.0)
    assert await after.tick()
    assert after.epoch == 2
    # ... with a new epoch, which fences off whatever the old process still writes.
    async with AsyncSession(bind=engine) as session:
        with pytest.raises(NotLeader):
            await before.fence(session)
    assert not before.is_leader


async def test_a_paused_leader_fails_its_fence_and_writes_nothing(engine: AsyncEngine) -> None:
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    paused = LeaseKeeper(engine=engine, replica="a" * 16, ttl=0.5, clock=frozen)
    other = LeaseKeeper(engine=engine, replica="b" * 16, ttl=30.0)
    assert await paused.tick()
    async with sessions() as session:
        await paused.fence(session)  # holds while it leads
        await session.execute(text("CREATE TABLE written (n int)"))
        await session.commit()

    await until_leader(other)  # the paused one renews no more; the other takes over
    assert paused.is_leader  # by its own stopped clock it still leads: only the fence knows

    async with sessions() as session:
        with pytest.raises(NotLeader):
            await paused.fence(session)
            await session.execute(text("INSERT INTO written VALUES (1)"))
            await session.commit()
    assert not paused.is_leader and paused.changes == 2
    async with engine.connect() as connection:
        assert (await connection.scalar(text("SELECT count(*) FROM written"))) == 0


async def test_a_fenced_transaction_holds_off_a_takeover_until_it_ends(
    engine: AsyncEngine,
) -> None:
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    leader = LeaseKeeper(engine=engine, replica="a" * 16, ttl=0.5, clock=frozen)
    other = LeaseKeeper(engine=engine, replica="b" * 16, ttl=30.0)
    assert await leader.tick()
    async with sessions() as session:
        await leader.fence(session)
        await session.execute(text("CREATE TABLE written (n int)"))
        # The lease expires meanwhile; the other's take waits on the row this transaction holds.
        await session.execute(text("SELECT pg_sleep(0.7)"))
        taking = asyncio.create_task(other.tick())
        await session.execute(text("SELECT pg_sleep(0.2)"))
        assert not taking.done()
        await session.execute(text("INSERT INTO written VALUES (1)"))
        await session.commit()
    assert await taking  # taken once the fenced transaction committed, with a new epoch
    assert other.epoch == 2
    async with engine.connect() as connection:
        assert (await connection.scalar(text("SELECT count(*) FROM written"))) == 1


async def test_releasing_lets_another_lead_at_once(engine: AsyncEngine) -> None:
    a = LeaseKeeper(engine=engine, replica="a" * 16, ttl=60.0)
    b = LeaseKeeper(engine=engine, replica="b" * 16, ttl=60.0)
    assert await a.tick()
    await a.release()
    assert not a.is_leader
    assert await b.tick() and b.epoch == 2
