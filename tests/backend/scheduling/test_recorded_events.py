"""Events written many in one statement (lifecycle.record_events) are stored, named and
published exactly as events flushed through the ORM are, on SQLite and on PostgreSQL."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from backend.audit.service import name_actor
from backend.auth import Principal, TokenKind
from backend.db import PublishingSession, session_factory
from backend.jobs.events import EventKind, record_event
from backend.jobs.models import Job, JobEvent
from backend.jobs.spec import JobSpec
from backend.scheduling.lifecycle import StoredEvent, record_events
from backend.streams.broker import Broker, Subscription, job_topic
from backend.streams.frames import EventFrame
from backend.streams.publishing import BROKER
from tests.support.factories import create_job, make_spec

ADA = Principal(kind=TokenKind.user, user_name="ada")


def starts(job_id: int, count: int) -> list[StoredEvent]:
    return [
        StoredEvent(
            job_id=job_id,
            kind=EventKind.task_status,
            task=f"worker:{index}",
            message=f"worker:{index} started on host-a (pid {100 + index})",
            data={"to": "running", "attempt": 0, "pid": 100 + index},
        )
        for index in range(count)
    ]


async def publishing_job(
    engine: AsyncEngine,
) -> tuple[async_sessionmaker[AsyncSession], int, Subscription]:
    """Sessions that publish as the server's do, a stored job, and a subscriber to it."""
    broker = Broker()
    sessions = session_factory(engine, sync_session_class=PublishingSession, info={BROKER: broker})
    async with sessions() as session:
        job = await create_job(
            session=session, spec=JobSpec.model_validate(make_spec("parameter_server"))
        )
        await session.commit()
    return sessions, job.id, broker.subscribe([job_topic(job.id)])


async def test_events_written_together_read_back_in_order_and_publish_after_commit(
    engine: AsyncEngine,
) -> None:
    sessions, job_id, subscription = await publishing_job(engine)

    async with sessions() as session:
        job = await session.get_one(Job, job_id)
        before = await record_event(
            session=session, job=job, kind=EventKind.restart, message="before"
        )
        stored = await record_events(session=session, events=starts(job_id, 3))
        assert subscription.pending() == 0  # nothing is seen before the commit
        await session.commit()

    assert [event.id for event in stored] == sorted(event.id for event in stored)
    assert stored[0].id > before.id
    async with sessions() as session:
        rows = list(
            await session.scalars(
                select(JobEvent)
                .where(JobEvent.id.in_([e.id for e in stored]))
                .order_by(JobEvent.id)
            )
        )
    assert [(r.task, r.message, r.data, r.kind, r.actor) for r in rows] == [
        (e.task, e.message, e.data, EventKind.task_status, None) for e in stored
    ]
    assert rows[0].at == stored[0].at
    assert subscription.pending() == 4
    frames = [await subscription.next() for _ in range(4)]
    assert all(isinstance(frame, EventFrame) for frame in frames)
    assert [frame.event.id for frame in frames if isinstance(frame, EventFrame)] == [
        before.id,
        *(event.id for event in stored),
    ]


async def test_events_written_together_name_the_actor_and_vanish_with_a_rollback(
    engine: AsyncEngine,
) -> None:
    sessions, job_id, subscription = await publishing_job(engine)

    async with sessions() as session:
        name_actor(session=session, principal=ADA)
        stored = await record_events(session=session, events=starts(job_id, 2))
        assert {event.actor for event in stored} == {ADA.label}
        await session.commit()
    async with sessions() as session:
        actors = set(
            await session.scalars(
                select(JobEvent.actor).where(JobEvent.id.in_([e.id for e in stored]))
            )
        )
        assert actors == {ADA.label}
    assert subscription.pending() == 2

    async with sessions() as session:
        rolled_back = await record_events(session=session, events=starts(job_id, 2))
        await session.rollback()
    assert subscription.pending() == 2  # only the committed two
    async with sessions() as session:
        found = await session.scalars(
            select(JobEvent.id).where(JobEvent.id.in_([e.id for e in rolled_back]))
        )
        assert list(found) == []


async def published_messages(subscription: Subscription) -> list[str | None]:
    """The messages of the events published so far, in order."""
    frames = [await subscription.next() for _ in range(subscription.pending())]
    return [frame.event.message for frame in frames if isinstance(frame, EventFrame)]


async def test_a_savepoints_events_are_published_with_its_transaction_or_never(
    engine: AsyncEngine,
) -> None:
    sessions, job_id, subscription = await publishing_job(engine)
    await published_messages(subscription)  # the submission's

    async with sessions() as session:
        job = await session.get_one(Job, job_id)
        await record_event(session=session, job=job, kind=EventKind.restart, message="outer")
        async with session.begin_nested():  # released: published when the outer commits
            await record_event(session=session, job=job, kind=EventKind.restart, message="kept")
        assert subscription.pending() == 0
        savepoint = await session.begin_nested()  # rolled back: never published
        await record_event(session=session, job=job, kind=EventKind.restart, message="undone")
        await savepoint.rollback()
        assert subscription.pending() == 0
        await record_event(session=session, job=job, kind=EventKind.restart, message="after")
        await session.commit()
    assert await published_messages(subscription) == ["outer", "kept", "after"]

    async with sessions() as session:  # a transaction that rolls back publishes nothing
        job = await session.get_one(Job, job_id)
        async with session.begin_nested():
            await record_event(session=session, job=job, kind=EventKind.restart, message="gone")
        await session.rollback()
    async with sessions() as session:  # nor does one closed without a commit
        job = await session.get_one(Job, job_id)
        await record_event(session=session, job=job, kind=EventKind.restart, message="dropped")
    async with sessions() as session:
        job = await session.get_one(Job, job_id)
        await record_event(session=session, job=job, kind=EventKind.restart, message="last")
        await session.commit()
    assert await published_messages(subscription) == ["last"]
