"""The lease on real PostgreSQL: two keepers on one database, as two replicas would be."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from backend.config import async_database_url
from backend.db import create_engine
from backend.leadership.lease import LeaseKeeper, NotLeader
from backend.leadership.models import Leadership, ServerReplica

pytestmark = pytest.mark.postgres


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(async_database_url(postgres_url))
    # Connected before the test: a lease of half a second is lost to a first connection that
    # takes longer on a busy machine (each attempt is bounded by the ttl).
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(3):
            await stack.enter_async_context(engine.connect())
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


class Clock:
    """A clock the test moves: where this replica believes a lease it saw expires."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def replica_rows(engine: AsyncEngine) -> dict[str, str]:
    async with engine.connect() as connection:
        rows = await connection.execute(select(ServerReplica.replica, ServerReplica.url))
    return {replica: url for replica, url in rows}


async def test_a_follower_knows_where_the_leader_is_while_its_lease_lasts(
    engine: AsyncEngine,
) -> None:
    clock = Clock()
    a = LeaseKeeper(engine=engine, replica="a" * 16, ttl=3.0, url="http://a.test:8000")
    b = LeaseKeeper(engine=engine, replica="b" * 16, ttl=3.0, url="http://b.test:8000", clock=clock)
    assert b.leader_url is None  # it has seen no lease yet
    assert await a.tick()
    assert a.leader_url == "http://a.test:8000"  # its own, while it leads
    assert not await b.tick()
    assert b.leader_url == "http://a.test:8000"
    clock.now += 2.5  # not yet expired, by b's clock
    assert b.leader_url == "http://a.test:8000"
    clock.now += 0.6  # a's lease (3 s from before b's attempt) has run out: nobody leads
    assert b.leader_url is None


async def test_a_leader_url_is_none_once_the_lease_expired_and_then_the_new_leaders(
    engine: AsyncEngine,
) -> None:
    a = LeaseKeeper(engine=engine, replica="a" * 16, ttl=0.5, url="http://a.test:8000")
    b = LeaseKeeper(engine=engine, replica="b" * 16, ttl=30.0, url="http://b.test:8000")
    c = LeaseKeeper(engine=engine, replica="c" * 16, ttl=30.0, url="http://c.test:8000")
    assert await a.tick() and not await b.tick() and not await c.tick()
    assert c.leader_url == "http://a.test:8000"
    await asyncio.sleep(0.6)  # a renews no more: its lease expires by the real clock
    assert c.leader_url is None
    await until_leader(b)
    assert b.leader_url == "http://b.test:8000"
    assert not await c.tick()
    assert c.leader_url == "http://b.test:8000"


async def test_a_follower_tries_as_the_lease_it_saw_expires(engine: AsyncEngine) -> None:
    clock = Clock()
    a = LeaseKeeper(engine=engine, replica="a" * 16, ttl=3.0, url="http://a.test:8000")
    b = LeaseKeeper(engine=engine, replica="b" * 16, ttl=30.0, clock=clock)
    assert b.next_delay() == pytest.approx(10.0)  # no lease seen: a third of its ttl
    assert await a.tick()
    assert a.next_delay() == pytest.approx(1.0)  # the leader renews every third of its ttl
    assert not await b.tick()
    # Not a third of b's 30 s: a's lease ends in about 3 s.
    assert 2.5 <= b.next_delay() <= 3.1
    clock.now += 2.0
    assert 0.5 <= b.next_delay() <= 1.1
    clock.now += 2.0  # past a's lease: at once (a short pause, never none)
    assert 0 < b.next_delay() <= 0.1


async def test_a_follower_that_waits_next_delay_takes_an_abandoned_lease(
    engine: AsyncEngine,
) -> None:
    a = LeaseKeeper(engine=engine, replica="a" * 16, ttl=1.0)
    b = LeaseKeeper(engine=engine, replica="b" * 16, ttl=30.0)
    assert await a.tick() and not await b.tick()
    started = asyncio.get_running_loop().time()
    running = asyncio.create_task(b.run())  # a renews no more
    try:
        for _ in range(400):
            if b.is_leader:
                break
            await asyncio.sleep(0.02)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert b.is_leader
    # Within about a's lease (1 s), not after a third of b's own ttl (10 s).
    assert asyncio.get_running_loop().time() - started < 4.0


async def test_a_leader_refused_a_renewal_is_told_it_was_superseded_once(
    engine: AsyncEngine,
) -> None:
    told: list[str] = []
    a = LeaseKeeper(engine=engine, replica="a" * 16, ttl=0.5, on_superseded=told.append)
    b = LeaseKeeper(engine=engine, replica="b" * 16, ttl=30.0)
    assert await a.tick()
    await until_leader(b)
    assert a.superseded is None and told == []  # it has not tried since
    assert not await a.tick()
    assert told == [a.superseded] and "b" * 16 in told[0]
    assert not await a.tick() and not await a.tick()
    assert len(told) == 1  # told once


async def test_a_fence_that_finds_another_epoch_tells_superseded_once(
    engine: AsyncEngine,
) -> None:
    told: list[str] = []
    paused = LeaseKeeper(
        engine=engine, replica="a" * 16, ttl=0.5, clock=frozen, on_superseded=told.append
    )
    other = LeaseKeeper(engine=engine, replica="b" * 16, ttl=30.0)
    assert await paused.tick()
    await until_leader(other)
    assert paused.is_leader  # by its stopped clock
    async with AsyncSession(bind=engine) as session:
        with pytest.raises(NotLeader):
            await paused.fence(session)
    assert told == [paused.superseded] and "epoch 1" in told[0]
    assert not await paused.tick()  # its renewal is refused too: not told again
    async with AsyncSession(bind=engine) as session:
        with pytest.raises(NotLeader):
            await paused.fence(session)
    assert len(told) == 1


async def test_a_lease_taken_back_after_another_term_tells_superseded(
    engine: AsyncEngine,
) -> None:
    told: list[str] = []
    a = LeaseKeeper(engine=engine, replica="a" * 16, ttl=0.5, on_superseded=told.append)
    b = LeaseKeeper(engine=engine, replica="b" * 16, ttl=30.0)
    assert await a.tick() and a.epoch == 1
    await until_leader(b)  # epoch 2, while a did not try
    await b.release()
    assert await a.tick()  # a takes the lease again, but another led in between
    assert a.epoch == 3
    assert told == [a.superseded] and "epoch 2 to 2" in told[0]


async def test_taking_its_own_lease_back_with_the_next_epoch_is_not_superseded(
    engine: AsyncEngine,
) -> None:
    told: list[str] = []
    clock = Clock()
    a = LeaseKeeper(
        engine=engine, replica="a" * 16, ttl=30.0, clock=clock, on_superseded=told.append
    )
    b = LeaseKeeper(engine=engine, replica="b" * 16, ttl=30.0)
    assert await a.tick() and a.epoch == 1
    assert not await b.tick()
    clock.now += 31  # a missed its renewals (a pause): by its clock the lease ran out
    assert not a.is_leader
    assert await a.tick()  # its own lease, taken back: the next epoch, nobody led between
    assert a.epoch == 2 and a.changes == 3
    assert await a.tick() and a.epoch == 2
    assert a.superseded is None and told == []


async def test_release_forgets_the_replica(engine: AsyncEngine) -> None:
    a = LeaseKeeper(engine=engine, replica="a" * 16, ttl=30.0, url="http://a.test:8000")
    b = LeaseKeeper(engine=engine, replica="b" * 16, ttl=30.0, url="http://b.test:8000")
    assert await a.tick() and not await b.tick()
    assert await replica_rows(engine) == {
        "a" * 16: "http://a.test:8000",
        "b" * 16: "http://b.test:8000",
    }
    await a.release()  # the leader
    assert await replica_rows(engine) == {"b" * 16: "http://b.test:8000"}
    await b.release()  # a follower: nothing to release but its row
    assert await replica_rows(engine) == {}
