"""Project quotas on the native backend: placement holds a job that would take its project
over `max_gpus` (with a reason that says so) and places other projects' jobs behind it; a quota
below what a project uses stops nothing. Real database (SQLite and PostgreSQL), PendingJobs
over a fake hub (tests/backend/scheduling/reconcilers)."""

from __future__ import annotations

from agents.protocol import StartTask, StopTask
from backend.jobs.spec import JobSpec
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.quotas import GpuQuotas
from backend.scheduling.reconcilers.pending_jobs import PendingJobs
from backend.slurm.models import Phase, SlurmJob
from backend.teams.models import Project
from tests.backend.scheduling.reconcilers.conftest import World
from tests.support.factories import create_job, make_spec


async def project(world: World, name: str, max_gpus: int | None) -> int:
    async with world.sessions() as session:
        row = Project(name=name, max_gpus=max_gpus)
        session.add(row)
        await session.commit()
        return row.id


async def job(world: World, project_id: int, gpus: int, priority: int = 0) -> int:
    """A mirrored job of one task with `gpus` GPUs in that project, pending."""
    spec = JobSpec.model_validate(
        make_spec("mirrored", replicas={"chief": {"count": 1, "gpus": gpus}}, priority=priority)
    )
    async with world.sessions() as session:
        created = await create_job(session=session, spec=spec, project_id=project_id)
        await session.commit()
        return created.id


def placing(world: World) -> PendingJobs:
    return PendingJobs(view=world.view, wake=lambda: None)


async def test_a_job_over_its_projects_quota_waits_and_other_projects_jobs_go_past_it(
    world: World,
) -> None:
    await world.host("host-a", gpus=4)
    vision = await project(world, "vision", max_gpus=2)
    nlp = await project(world, "nlp", max_gpus=2)
    first = await job(world, vision, gpus=2, priority=5)
    over = await job(world, vision, gpus=1, priority=5)  # ahead of nlp's in the queue
    other = await job(world, nlp, gpus=2)

    outbox = await world.run(placing(world))

    assert (await world.load(first)).status is JobStatus.scheduled
    waiting = await world.load(over)
    assert waiting.status is JobStatus.pending
    assert waiting.reason == "project vision uses 2 of its 2 GPUs; this job needs 1"
    assert (await world.load(other)).status is JobStatus.scheduled
    started = {m.key.job_id for _, m in outbox.messages if isinstance(m, StartTask)}
    assert started == {first, other}


async def test_jobs_placed_in_one_pass_count_against_the_quota_of_the_next(world: World) -> None:
    await world.host("host-a", gpus=8)
    vision = await project(world, "vision", max_gpus=6)
    jobs = [await job(world, vision, gpus=2) for _ in range(3)]
    extra = await job(world, vision, gpus=4)

    await world.run(placing(world))

    assert [(await world.load(j)).status for j in jobs] == [JobStatus.scheduled] * 3
    waiting = await world.load(extra)
    assert waiting.status is JobStatus.pending
    assert waiting.reason == "project vision uses 6 of its 6 GPUs; this job needs 4"


async def test_a_waiting_job_starts_once_its_projects_job_ends(world: World) -> None:
    await world.host("host-a", gpus=4)
    vision = await project(world, "vision", max_gpus=2)
    first = await job(world, vision, gpus=2)
    second = await job(world, vision, gpus=2)
    await world.run(placing(world))
    assert (await world.load(second)).status is JobStatus.pending

    done = await world.load(first)
    await world.set_task(done.tasks[0].id, status=TaskStatus.succeeded)
    await world.set_job_status(first, JobStatus.succeeded)
    await world.run(placing(world))

    assert (await world.load(second)).status is JobStatus.scheduled


async def test_a_quota_lowered_below_use_stops_nothing_and_holds_new_jobs(world: World) -> None:
    await world.host("host-a", gpus=4)
    vision = await project(world, "vision", max_gpus=None)
    running = await world.running("mirrored", replicas={"chief": {"count": 1, "gpus": 3}})
    async with world.sessions() as session:
        moved = await session.get_one(type(running), running.id)
        moved.project_id = vision
        row = await session.get_one(Project, vision)
        row.max_gpus = 1
        await session.commit()
    new = await job(world, vision, gpus=1)
    gpu_less = await job(world, vision, gpus=0)

    outbox = await world.run(placing(world))

    assert (await world.load(running.id)).status is JobStatus.running
    assert not [m for _, m in outbox.messages if isinstance(m, StopTask)]
    assert (await world.load(new)).reason == "project vision uses 3 of its 1 GPUs; this job needs 1"
    # A job that needs no GPU is not held by a GPU quota.
    assert (await world.load(gpu_less)).status is JobStatus.scheduled


async def test_slurm_jobs_do_not_count_and_projects_without_a_quota_are_not_counted(
    world: World,
) -> None:
    await world.host("host-a", gpus=4)
    vision = await project(world, "vision", max_gpus=2)
    await project(world, "free", max_gpus=None)
    placed = await job(world, vision, gpus=2)
    await world.run(placing(world))
    assert (await world.load(placed)).status is JobStatus.scheduled
    async with world.sessions() as session:
        quotas = await GpuQuotas.load(session, uncounted=world.executors.uncounted_jobs())
        assert quotas.used == {vision: 2}
        assert list(quotas.limits) == [vision]
        # The same job, had it run on Slurm, is Slurm's to limit (its project's account).
        session.add(SlurmJob(job_id=placed, name="strata-x", marker="m", phase=Phase.recorded))
        await session.commit()
    async with world.sessions() as session:
        uncounted = world.executors.uncounted_jobs()
        assert (await GpuQuotas.load(session, uncounted=uncounted)).used == {}
