"""Drains: a pass has every job with live tasks on a draining host interrupted (a recording
interrupter here), once at a time, so that a drain completes even when its request's own
interruptions were lost (a server restart) or a task reached the host as it was committed."""

from __future__ import annotations

from sqlalchemy import update

from backend.db import utcnow
from backend.hosts.models import Host
from backend.scheduling.reconcilers.drains import Drains
from tests.backend.scheduling.reconcilers.conftest import World


class RecordingInterrupter:
    def __init__(self) -> None:
        self.in_flight: dict[int, object] = {}
        self.asked: list[tuple[int, str, frozenset[tuple[str, int]], float, str]] = []

    def vacate(
        self,
        job_id: int,
        host: str,
        attempts: frozenset[tuple[str, int]],
        deadline: float,
        *,
        why: str,
        cause: str,
    ) -> None:
        self.asked.append((job_id, host, attempts, deadline, why))
        self.in_flight[job_id] = object()


async def drain(world: World, host: str) -> None:
    async with world.sessions() as session:
        await session.execute(update(Host).where(Host.name == host).values(draining_since=utcnow()))
        await session.commit()


async def test_a_job_left_on_a_draining_host_is_moved_off_once_at_a_time(world: World) -> None:
    await world.host("host-a", gpus=2)
    await world.host("host-b", gpus=2)
    job = await world.running("mirrored", replicas={"chief": {"count": 1, "gpus": 2}})
    assert job.tasks[0].host is not None
    host = job.tasks[0].host.name
    interrupter = RecordingInterrupter()
    drains = Drains(interrupter=interrupter, deadline=30.0)

    await world.run(drains)
    assert interrupter.asked == []  # no host is draining

    await drain(world, host)
    await world.run(drains)
    assert interrupter.asked == [
        (job.id, host, frozenset({("chief:0", 0)}), 30.0, f"{host} is being drained")
    ]
    await world.run(drains)  # its interruption is under way: not asked again
    assert len(interrupter.asked) == 1

    interrupter.in_flight.clear()  # lost (a server restart): the next pass asks again
    await world.run(drains)
    assert len(interrupter.asked) == 2
