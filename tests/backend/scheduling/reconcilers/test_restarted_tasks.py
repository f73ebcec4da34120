"""RestartedTasks: a restarted attempt starts once its backoff is over, its predecessor has
gone, and its host can be reached."""

from __future__ import annotations

from datetime import timedelta

from agents.protocol import StartTask
from backend.db import utcnow
from backend.jobs.models import Job
from backend.jobs.states import TaskStatus
from backend.scheduling.reconcilers.restarted_tasks import RestartedTasks
from tests.backend.scheduling.reconcilers.conftest import World


async def restarted(world: World, *, after_seconds: float) -> Job:
    """A running job whose chief was restarted in place (attempt 1, scheduled)."""
    await world.host("host-a")
    job = await world.running("mirrored")
    chief = job.tasks[0]
    await world.set_task(
        chief.id,
        attempt=1,
        status=TaskStatus.scheduled,
        restart_after=utcnow() + timedelta(seconds=after_seconds),
    )
    return await world.load(job.id)


async def test_starts_the_next_attempt_once_due(world: World) -> None:
    job = await restarted(world, after_seconds=-1)
    outbox = await world.run(RestartedTasks(view=world.view))
    [(host, message)] = outbox.messages
    assert host == "host-a"
    assert isinstance(message, StartTask)
    assert (message.key.task, message.key.attempt) == ("chief:0", 1)
    assert message.port == job.tasks[0].port  # same host and port


async def test_waits_for_the_backoff(world: World) -> None:
    await restarted(world, after_seconds=60)
    assert (await world.run(RestartedTasks(view=world.view))).messages == []


async def test_waits_while_the_earlier_attempt_still_runs(world: World) -> None:
    job = await restarted(world, after_seconds=-1)
    world.view.running.report(
        "host-a", frozenset({job.tasks[0].key.model_copy(update={"attempt": 0})})
    )
    assert (await world.run(RestartedTasks(view=world.view))).messages == []


async def test_waits_for_an_unreachable_host(world: World) -> None:
    await restarted(world, after_seconds=-1)
    world.hub.names.discard("host-a")
    assert (await world.run(RestartedTasks(view=world.view))).messages == []
