"""LostHosts: a host silent past the timeout is lost, its tasks with it; their jobs are
re-placed while restarts remain, else they fail. Not before the start-up grace is over."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from backend.hosts.models import Host
from backend.hosts.states import HostStatus
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.reconcilers.lost_hosts import CHECK_EVERY_SECONDS, LostHosts
from tests.backend.scheduling.reconcilers.conftest import World


def lost_hosts(world: World) -> LostHosts:
    return LostHosts(view=world.view, pace=world.pace)


def after_grace(world: World, silent_for: float) -> None:
    """As if the server had been up for long, and host-a last heard `silent_for` ago."""
    now = time.monotonic()
    world.view.started = now - 1000
    world.view.last_heard["host-a"] = now - silent_for


async def host_status(world: World, name: str) -> HostStatus:
    async with world.sessions() as session:
        status = await session.scalar(select(Host.status).where(Host.name == name))
        assert status is not None
        return status


async def test_a_silent_host_is_lost_and_its_job_placed_again(world: World) -> None:
    await world.host("host-a")
    job = await world.running("mirrored", restart={"policy": "on_failure", "max_restarts": 2})
    after_grace(world, silent_for=world.settings.heartbeat_timeout_seconds + 1)
    await world.run(lost_hosts(world))
    assert await host_status(world, "host-a") is HostStatus.lost
    again = await world.load(job.id)
    assert again.status is JobStatus.pending
    assert again.restart_count == 1
    assert [(t.status, t.attempt, t.host_id) for t in again.tasks] == [
        (TaskStatus.pending, 1, None)
    ]


async def test_without_restarts_left_the_job_fails(world: World) -> None:
    await world.host("host-a")
    job = await world.running("mirrored", restart={"policy": "never"})
    after_grace(world, silent_for=world.settings.heartbeat_timeout_seconds + 1)
    await world.run(lost_hosts(world))
    failed = await world.load(job.id)
    assert failed.status is JobStatus.failed
    assert failed.reason is not None and failed.reason.startswith("host host-a was lost")
    assert [t.status for t in failed.tasks] == [TaskStatus.lost]


async def test_a_host_heard_recently_is_kept(world: World) -> None:
    await world.host("host-a")
    after_grace(world, silent_for=0.5)
    await world.run(lost_hosts(world))
    assert await host_status(world, "host-a") is HostStatus.online


async def test_nothing_is_lost_during_the_start_up_grace(world: World) -> None:
    await world.host("host-a")
    world.view.last_heard["host-a"] = time.monotonic() - 1000
    await world.run(lost_hosts(world))
    assert await host_status(world, "host-a") is HostStatus.online


async def test_a_stretched_heartbeat_period_stretches_the_silence_allowed(world: World) -> None:
    await world.host("host-a")
    least = world.settings.heartbeat_timeout_seconds
    assert world.pace.fleet_of(round(3 * world.settings.max_heartbeats_per_second))
    assert world.pace.timeout_seconds == pytest.approx(3 * least)
    after_grace(world, silent_for=2 * least)  # lost at the configured period, not at this one
    await world.run(lost_hosts(world))
    assert await host_status(world, "host-a") is HostStatus.online
    after_grace(world, silent_for=3 * least + 1)
    await world.run(lost_hosts(world))
    assert await host_status(world, "host-a") is HostStatus.lost


async def test_the_hosts_are_read_at_most_once_a_check_period(world: World) -> None:
    await world.host("host-a")
    reconciler = lost_hosts(world)
    after_grace(world, silent_for=0.5)
    await world.run(reconciler)  # a check: host-a is heard from
    after_grace(world, silent_for=world.settings.heartbeat_timeout_seconds + 1)
    await world.run(reconciler)  # within the period of the last check: not read again
    assert await host_status(world, "host-a") is HostStatus.online
    reconciler.checked_at -= CHECK_EVERY_SECONDS
    await world.run(reconciler)  # the next check finds it silent
    assert await host_status(world, "host-a") is HostStatus.lost
