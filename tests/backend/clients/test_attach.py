"""Attaching a job's client coordinator: who may, when, one at a time; heartbeats and
detaching; the environment it gets (a chief's, less what is the client's own business)."""

from __future__ import annotations

import json

import pytest
from pydantic import SecretStr
from sqlalchemy import select

from agents.environment import TaskEnvironment
from backend.api.clients import client_env
from backend.auth import TokenKind, TokenRegistry
from backend.clients import service
from backend.errors import Conflict, NotFound
from backend.jobs.models import Job, JobClient, JobEvent
from backend.jobs.states import JobStatus
from tests.backend.scheduling.reconcilers.conftest import World

SERVERS = {"worker": {"count": 2}, "ps": {"count": 1}}


async def client_job(world: World, **overrides: object) -> Job:
    await world.host("host-a", gpus=4)
    return await world.running(
        "parameter_server", coordinator="client", replicas=SERVERS, entrypoint=[], **overrides
    )


async def attach(world: World, job_id: int, pid: int, *, take_over: bool = False) -> int:
    async with world.sessions() as session:
        client = await service.attach(
            session=session,
            job_id=job_id,
            host="laptop",
            pid=pid,
            actor="alice",
            take_over=take_over,
        )
        await session.commit()
        return client.session


async def test_one_client_at_a_time_unless_it_takes_over(world: World) -> None:
    job = await client_job(world)
    assert await attach(world, job.id, pid=10) == 1
    with pytest.raises(
        Conflict,
        match=r"coordinator is client 1 \(alice on laptop, pid 10\), "
        r"attached since .*; connect with take_over=True",
    ):
        await attach(world, job.id, pid=11)
    assert await attach(world, job.id, pid=11, take_over=True) == 2
    async with world.sessions() as session:
        # The one taken over from learns it at its next heartbeat.
        with pytest.raises(Conflict, match=r"session 1 of job .* was taken over by client 2"):
            await service.heartbeat(session=session, job_id=job.id, number=1)
        await service.heartbeat(session=session, job_id=job.id, number=2)
        with pytest.raises(NotFound, match="has no client session 3"):
            await service.heartbeat(session=session, job_id=job.id, number=3)
        events = await session.scalars(select(JobEvent).where(JobEvent.kind == "client"))
        assert [e.message for e in events][-1] == (
            "client 2 (alice on laptop, pid 11) attached as the coordinator, taking over from "
            "client 1 (alice on laptop, pid 10)"
        )


async def test_detach_is_once_and_a_new_client_may_attach_after(world: World) -> None:
    job = await client_job(world)
    await attach(world, job.id, pid=10)
    for _ in range(2):  # the second detach of the same session changes nothing
        async with world.sessions() as session:
            await service.detach_session(session=session, job_id=job.id, number=1)
            await session.commit()
    async with world.sessions() as session:
        assert not (await session.get_one(JobClient, job.id)).attached
        events = await session.scalars(select(JobEvent).where(JobEvent.kind == "client"))
        assert [e.data["attached"] for e in events] == [True, False]
    assert await attach(world, job.id, pid=12) == 2


async def test_a_client_found_gone_that_beats_again_is_back(world: World) -> None:
    # A laptop that slept past STRATA_CLIENT_LOST_SECONDS: its next heartbeat attaches it
    # again, unless the job has ended meanwhile.
    job = await client_job(world)
    await attach(world, job.id, pid=10)
    async with world.sessions() as session:
        client = await session.get_one(JobClient, job.id)
        await service.detach(session=session, job=job, client=client, why="is gone")
        await session.commit()
    async with world.sessions() as session:
        assert (await service.heartbeat(session=session, job_id=job.id, number=1)).attached
        await session.commit()
        events = await session.scalars(select(JobEvent).where(JobEvent.kind == "client"))
        assert [e.message for e in events][-1] == (
            "client 1 (alice on laptop, pid 10) is back as the coordinator"
        )
    async with world.sessions() as session:
        client = await session.get_one(JobClient, job.id)
        await service.detach(session=session, job=job, client=client, why="is gone")
        await session.commit()
    await world.set_job_status(job.id, JobStatus.cancelled)
    async with world.sessions() as session:
        with pytest.raises(Conflict, match="is detached: the job is cancelled"):
            await service.heartbeat(session=session, job_id=job.id, number=1)


async def test_only_a_running_client_job_takes_a_client(world: World) -> None:
    chief = await client_job(world)
    await world.set_job_status(chief.id, JobStatus.cancelled)
    with pytest.raises(Conflict, match="is cancelled: a client attaches while its workers"):
        await attach(world, chief.id, pid=10)
    other = await world.running("parameter_server")
    with pytest.raises(Conflict, match="coordinator is its chief task"):
        await attach(world, other.id, pid=10)
    with pytest.raises(NotFound, match="job 999 does not exist"):
        await attach(world, 999, pid=10)


async def test_the_client_gets_a_chiefs_environment_without_a_device_list(world: World) -> None:
    job = await client_job(world, env={"MY_FLAG": "1"})
    registry = TokenRegistry({TokenKind.admin: SecretStr("admin-secret")})
    cluster = {"worker": ["h:1", "h:2"], "ps": ["h:3"]}
    env = client_env(job, 3, cluster, registry, world.settings)
    told = TaskEnvironment.from_env(env)
    assert told.task is not None and str(told.task) == "chief:0"
    assert (told.attempt, told.client_session, told.job_id) == (3, 3, job.id)
    assert told.task_token == registry.task_token(job.id)
    assert told.checkpoint_dir == str(world.settings.checkpoints / f"job-{job.id}")
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": cluster,
        "task": {"type": "chief", "index": 0},
    }
    # Not the client's to be told: its devices, and the job's own variables (its process
    # is the user's; a chief's are set by the spec).
    assert "CUDA_VISIBLE_DEVICES" not in env and "MY_FLAG" not in env
