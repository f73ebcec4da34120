"""HeartbeatTimes: when each agent heard since was last heard from, written in one go."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from sqlalchemy import select

from backend.db import utcnow
from backend.hosts.models import Host
from backend.scheduling.reconcilers.heartbeat_times import HeartbeatTimes
from tests.backend.scheduling.reconcilers.conftest import World


async def heartbeat_at(world: World, name: str) -> datetime | None:
    async with world.sessions() as session:
        return await session.scalar(select(Host.last_heartbeat_at).where(Host.name == name))


async def test_writes_when_each_host_was_heard(world: World) -> None:
    await world.host("host-a")
    await world.host("host-b")
    world.view.heard_from("host-a")
    world.view.last_heard["host-a"] = time.monotonic() - 3  # heard 3 s ago
    before = await heartbeat_at(world, "host-b")
    await world.run(HeartbeatTimes(view=world.view, pace=world.pace))
    written = await heartbeat_at(world, "host-a")
    assert written is not None
    assert abs((utcnow() - timedelta(seconds=3) - written).total_seconds()) < 1.5
    assert await heartbeat_at(world, "host-b") == before  # not heard: not written
    assert world.view.heard_since_recorded == set()


async def test_at_most_once_per_heartbeat_period(world: World) -> None:
    await world.host("host-a")
    world.view.heard_from("host-a")
    times = HeartbeatTimes(view=world.view, pace=world.pace)
    await world.run(times)
    world.view.heard_from("host-a")
    await world.run(times)
    assert world.view.heard_since_recorded == {"host-a"}  # kept for a later pass


async def test_a_host_heard_but_no_longer_stored_is_passed_over(world: World) -> None:
    await world.host("host-a")
    world.view.heard_from("host-a")
    world.view.heard_from("host-gone")  # heard, then removed before the pass wrote it
    await world.run(HeartbeatTimes(view=world.view, pace=world.pace))
    assert await heartbeat_at(world, "host-gone") is None
    written = await heartbeat_at(world, "host-a")
    assert written is not None
    assert abs((utcnow() - written).total_seconds()) < 1.5
