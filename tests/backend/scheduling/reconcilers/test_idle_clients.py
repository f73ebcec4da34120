"""IdleClients: a client coordinator gone quiet is detached; a job left without one for its
client_idle_timeout ends, its servers told to stop; a chief-coordinated job is never touched."""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy import select

from agents.protocol import StopTask
from backend.clients import service
from backend.db import utcnow
from backend.jobs.models import Job, JobClient, JobEvent
from backend.jobs.states import JobStatus
from backend.scheduling.reconcilers.idle_clients import IdleClients
from tests.backend.scheduling.reconcilers.conftest import World

SERVERS = {"worker": {"count": 2}, "ps": {"count": 1}}


def idle_clients(world: World, *, up_for: float = 3600.0) -> IdleClients:
    """The reconciler of a server that started `up_for` seconds ago."""
    return IdleClients(settings=world.settings, started=utcnow() - timedelta(seconds=up_for))


async def client_job(world: World, **overrides: object) -> Job:
    await world.host("host-a", gpus=4)
    return await world.running(
        "parameter_server", coordinator="client", replicas=SERVERS, entrypoint=[], **overrides
    )


async def attach(world: World, job_id: int) -> None:
    async with world.sessions() as session:
        await service.attach(
            session=session, job_id=job_id, host="laptop", pid=42, actor="alice", take_over=False
        )
        await session.commit()


async def age(world: World, job_id: int, seconds: float, *, detached: bool = False) -> None:
    """Moves the client's (or, with none, the job's start's) times `seconds` back."""
    async with world.sessions() as session:
        client = await session.get(JobClient, job_id)
        if client is None:
            job = await session.get_one(Job, job_id)
            assert job.started_at is not None
            job.started_at -= timedelta(seconds=seconds)
        else:
            client.seen_at -= timedelta(seconds=seconds)
            if detached:
                client.detached_at = client.seen_at
        await session.commit()


async def messages(world: World, job_id: int) -> list[str]:
    async with world.sessions() as session:
        events = await session.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.kind == "client")
        )
        return [event.message or "" for event in events]


async def test_a_client_that_stopped_beating_is_detached_as_gone(world: World) -> None:
    job = await client_job(world)
    await attach(world, job.id)
    await age(world, job.id, world.settings.client_lost_seconds - 5)
    await world.run(idle_clients(world))
    async with world.sessions() as session:
        assert (await session.get_one(JobClient, job.id)).attached  # not silent long enough
    await age(world, job.id, 10)
    await world.run(idle_clients(world))
    async with world.sessions() as session:
        client = await session.get_one(JobClient, job.id)
        assert not client.attached
    # 35 s at least: the time between aging the client and the pass counts too.
    silence = re.search(r"is gone: no heartbeat for (\d+)s$", (await messages(world, job.id))[-1])
    assert silence is not None and int(silence.group(1)) >= 35
    assert (await world.load(job.id)).status is JobStatus.running  # its idle time starts now


async def test_a_job_without_a_client_for_its_timeout_ends_and_its_servers_stop(
    world: World,
) -> None:
    job = await client_job(world, client_idle_timeout=60)
    await attach(world, job.id)
    await age(world, job.id, 50, detached=True)
    await world.run(idle_clients(world))
    assert (await world.load(job.id)).status is JobStatus.running
    await age(world, job.id, 20, detached=True)
    outbox = await world.run(idle_clients(world))
    ended = await world.load(job.id)
    assert ended.status is JobStatus.cancelled
    assert ended.reason == "no client attached for 1m10s (client_idle_timeout 1m00s)"
    stopped = {m.key.task for _, m in outbox.messages if isinstance(m, StopTask)}
    assert stopped == {"worker:0", "worker:1", "ps:0"}


async def test_a_job_no_client_ever_attached_to_ends_after_the_servers_default(
    world: World,
) -> None:
    job = await client_job(world)
    await age(world, job.id, world.settings.client_idle_timeout + 1)
    await world.run(idle_clients(world))
    assert (await world.load(job.id)).status is JobStatus.cancelled


async def test_an_attached_client_keeps_its_job_and_a_chief_job_is_never_touched(
    world: World,
) -> None:
    job = await client_job(world, client_idle_timeout=1)
    await attach(world, job.id)
    await age(world, job.id, 0)
    chief_job = await world.running("parameter_server")
    async with world.sessions() as session:
        started = await session.get_one(Job, chief_job.id)
        assert started.started_at is not None
        started.started_at -= timedelta(days=30)
        await session.commit()
    outbox = await world.run(idle_clients(world))
    assert outbox.messages == []
    assert (await world.load(job.id)).status is JobStatus.running
    assert (await world.load(chief_job.id)).status is JobStatus.running


async def test_a_server_just_started_gives_a_quiet_client_its_time(world: World) -> None:
    # The client beat at the server before it restarted: it is not gone for the downtime.
    job = await client_job(world)
    await attach(world, job.id)
    await age(world, job.id, 600)
    await world.run(idle_clients(world, up_for=5))
    async with world.sessions() as session:
        assert (await session.get_one(JobClient, job.id)).attached
    await world.run(idle_clients(world, up_for=world.settings.client_lost_seconds + 1))
    async with world.sessions() as session:
        assert not (await session.get_one(JobClient, job.id)).attached
