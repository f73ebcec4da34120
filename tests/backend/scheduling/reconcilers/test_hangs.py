"""Hangs: a running job whose step has stood still past its hang timeout gets its tasks'
stacks asked for, then restarts every training task; busy phases and opted-out jobs are left
alone; the timeout follows the spec, the server's default and the median step time."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select

from agents.protocol import CollectStacks, Progress
from backend.jobs.models import JobEvent
from backend.jobs.states import JobStatus
from backend.scheduling.reconcilers.hangs import STACKS_SECONDS, Hangs, hang_timeout
from backend.streams.progress import ProgressBoard
from tests.backend.scheduling.reconcilers.conftest import World


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_timeout_is_the_spec_s_else_the_default_or_five_median_steps() -> None:
    assert hang_timeout(20.0, 120.0, 0.5) == 20.0
    assert hang_timeout(0.0, 120.0, 0.5) is None  # the job opted out
    assert hang_timeout(None, 120.0, None) == 120.0
    assert hang_timeout(None, 120.0, 60.0) == 300.0  # slow steps: five of them
    assert hang_timeout(None, 0.0, 60.0) is None  # the server's default is off


def stacks_asked(world: World) -> list[CollectStacks]:
    return [m for _, m in world.hub.sent if isinstance(m, CollectStacks)]


async def hung_world(world: World, **spec: object) -> tuple[int, Hangs, Clock, ProgressBoard]:
    await world.host("host-a", gpus=2)
    job = await world.running("mirrored", **spec)
    clock = Clock()
    board = ProgressBoard(clock=clock, wall=lambda: datetime.now(UTC))
    board.note(job.id, "chief:0", 0, Progress(step=10, total_steps=100, epoch=0))
    clock.now += 1
    board.note(job.id, "chief:0", 0, Progress(step=20, total_steps=100, epoch=0))
    world.hub.sent.clear()  # its start
    return job.id, Hangs(board=board, settings=world.settings, clock=clock), clock, board


async def test_a_hung_job_has_its_stacks_collected_then_restarts(world: World) -> None:
    job_id, hangs, clock, board = await hung_world(world, hang_timeout=30)
    clock.now += 29
    await world.run(hangs)
    assert stacks_asked(world) == [] and hangs.declared == {}

    clock.now += 2
    await world.run(hangs)
    asked = stacks_asked(world)
    assert [k.task for m in asked for k in m.keys] == ["chief:0"]
    assert asked[0].reason.startswith("hung: no step for 31s at step 20 (median step 0.1 s)")
    async with world.sessions() as session:
        events = list(await session.scalars(select(JobEvent).where(JobEvent.kind == "health")))
    assert len(events) == 1 and events[0].data["finding"] == "hung"
    assert events[0].data["timeout_seconds"] == 30
    assert (await world.load(job_id)).status is JobStatus.running  # not yet: stacks first

    clock.now += STACKS_SECONDS
    await world.run(hangs)
    job = await world.load(job_id)
    assert job.status is JobStatus.restarting
    assert job.reason is not None and job.reason.startswith("hung: no step for 31s")
    assert (job.failure_count, job.tasks[0].attempt) == (1, 1)
    assert board.job_ids() == set() and hangs.declared == {}


async def test_a_busy_phase_and_an_opted_out_job_are_not_hangs(world: World) -> None:
    job_id, hangs, clock, board = await hung_world(world, hang_timeout=30)
    board.note(job_id, "chief:0", 0, Progress(step=20, epoch=0, busy="checkpointing"))
    clock.now += 299
    await world.run(hangs)
    assert stacks_asked(world) == []  # busy phases get five timeouts (at least 5 minutes)
    clock.now += 2
    await world.run(hangs)  # a checkpoint write that never ends is a hang after all
    assert [m.reason[:32] for m in stacks_asked(world)] == ["hung: checkpointing for 5m01s at"]
    world.hub.sent.clear()

    other_id, opted_out, other_clock, _ = await hung_world(world, hang_timeout=0)
    other_clock.now += 3600
    await world.run(opted_out)
    assert stacks_asked(world) == [] and (await world.load(other_id)).status is JobStatus.running


async def test_a_hung_job_without_restarts_left_fails(world: World) -> None:
    job_id, hangs, clock, _ = await hung_world(world, hang_timeout=30, restart={"policy": "never"})
    clock.now += 31
    await world.run(hangs)
    clock.now += STACKS_SECONDS
    await world.run(hangs)
    job = await world.load(job_id)
    assert job.status is JobStatus.failed
    assert job.reason is not None and job.reason.startswith("hung: no step for 31s")
