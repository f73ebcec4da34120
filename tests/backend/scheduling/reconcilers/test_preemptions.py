"""Preemptions: a pending job of higher priority that fits nowhere has the running jobs that
make room interrupted (a recording interrupter here); it then waits for them to stop, and
they wait until it is placed."""

from __future__ import annotations

import functools

import pytest

from backend.jobs.models import Job
from backend.jobs.states import JobStatus
from backend.scheduling.interruptions import ResumePoint, preempt
from backend.scheduling.reconcilers.pending_jobs import PendingJobs
from backend.scheduling.reconcilers.preemptions import Preemptions
from backend.scheduling.transaction import Transaction
from backend.teams.models import Project
from tests.backend.scheduling.reconcilers.conftest import World


class RecordingInterrupter:
    def __init__(self) -> None:
        self.in_flight: dict[int, object] = {}
        self.asked: list[tuple[int, int]] = []

    def preempt(self, job_id: int, by_id: int) -> None:
        self.asked.append((job_id, by_id))


def one_chief(gpus: int, **overrides: object) -> dict[str, object]:
    return {"replicas": {"chief": {"count": 1, "gpus": gpus}}, **overrides}


async def a_pass(world: World, interrupter: RecordingInterrupter) -> None:
    await world.run(PendingJobs(view=world.view, wake=lambda: None))
    await world.run(Preemptions(view=world.view, settings=world.settings, interrupter=interrupter))


async def test_a_job_of_higher_priority_has_the_one_that_makes_room_interrupted(
    world: World,
) -> None:
    await world.host("host-a", gpus=2)
    low = await world.running("mirrored", **one_chief(2))
    high = await world.job("mirrored", **one_chief(1, priority=5))
    interrupter = RecordingInterrupter()
    await a_pass(world, interrupter)
    assert interrupter.asked == [(low.id, high)]
    assert world.view.preempting == {high: {low.id}}
    waiting = await world.load(high)
    assert waiting.reason == f"preempting job {low.id} (lower priority) for its room"

    # Decided once: the next pass asks nothing more while the plan stands.
    await a_pass(world, interrupter)
    assert interrupter.asked == [(low.id, high)]

    # Interrupted, its old attempt still running: the job waits for it to stop.
    async with world.sessions() as session:
        tx = Transaction(session=session, executors=world.executors)
        assert await preempt(tx, job_id=low.id, by_id=high, point=ResumePoint())
        await session.commit()
    world.view.capacity_changed()  # as the controller does after a change that frees room
    world.view.running.report("host-a", frozenset(task.key for task in low.tasks))
    await a_pass(world, interrupter)
    assert (await world.load(high)).reason == (
        f"waiting for the jobs it preempted ({low.id}) to stop"
    )
    victim = await world.load(low.id)
    assert (victim.status, victim.restart_count) == (JobStatus.pending, 0)
    assert victim.reason == "waiting for the tasks of its previous attempt to stop"

    world.view.running.report("host-a", frozenset())  # the agent stopped it
    await a_pass(world, interrupter)
    assert (await world.load(high)).status is JobStatus.scheduled
    assert (await world.load(low.id)).status is JobStatus.pending
    assert world.view.preempting == {}


async def test_never_a_job_of_equal_priority_nor_one_that_is_not_preemptible(
    world: World,
) -> None:
    await world.host("host-a", gpus=2)
    await world.running("mirrored", **one_chief(1, priority=5))
    await world.running("mirrored", **one_chief(1, preemptible=False))
    await world.job("mirrored", **one_chief(1, priority=5))
    interrupter = RecordingInterrupter()
    await a_pass(world, interrupter)
    assert interrupter.asked == []
    assert world.view.preempting == {}


async def test_a_job_that_fits_or_is_held_by_its_quota_preempts_nothing(world: World) -> None:
    await world.host("host-a", gpus=2)
    await world.running("mirrored", **one_chief(1))
    interrupter = RecordingInterrupter()
    preemptions = functools.partial(
        Preemptions, view=world.view, settings=world.settings, interrupter=interrupter
    )
    fits = await world.job("mirrored", **one_chief(1, priority=5))
    await world.run(preemptions())  # before PendingJobs has placed it: it fits
    assert interrupter.asked == []
    assert (await world.load(fits)).status is JobStatus.pending


async def test_a_preempted_job_is_not_placed_before_the_job_it_made_room_for(
    world: World,
) -> None:
    await world.host("host-a", gpus=2)
    low = await world.job("mirrored", **one_chief(1))
    world.view.preempting[99] = {low}  # job 99 waits for the room `low` had
    await world.run(PendingJobs(view=world.view, wake=lambda: None))
    job = await world.load(low)
    assert (job.status, job.reason) == (
        JobStatus.pending,
        "preempted for job 99: waiting until it is placed",
    )


async def in_project(world: World, job_id: int, project_id: int) -> None:
    async with world.sessions() as session:
        (await session.get_one(Job, job_id)).project_id = project_id
        await session.commit()


@pytest.mark.parametrize("may_preempt_other_projects", [True, False])
async def test_a_project_that_may_not_preempt_other_projects_preempts_only_its_own_jobs(
    world: World, may_preempt_other_projects: bool
) -> None:
    await world.host("host-a", gpus=2)
    async with world.sessions() as session:
        vision = Project(name="vision", may_preempt_other_projects=may_preempt_other_projects)
        session.add(vision)
        await session.commit()
        vision_id = vision.id
    # Another project's job of the lowest priority: the first choice wherever it may be taken.
    theirs = await world.running("mirrored", **one_chief(1, priority=-1))
    ours = await world.running("mirrored", **one_chief(1))
    await in_project(world, ours.id, vision_id)
    high = await world.job("mirrored", **one_chief(1, priority=5))
    await in_project(world, high, vision_id)
    interrupter = RecordingInterrupter()
    await a_pass(world, interrupter)
    victim = theirs.id if may_preempt_other_projects else ours.id
    assert interrupter.asked == [(victim, high)]
