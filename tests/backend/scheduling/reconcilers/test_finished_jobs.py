"""FinishedJobs: what still runs of an ended job is stopped; what never started is dropped."""

from __future__ import annotations

from agents.protocol import StopTask
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.reconcilers.finished_jobs import FinishedJobs
from tests.backend.scheduling.reconcilers.conftest import World


async def test_live_tasks_of_an_ended_job_are_told_to_stop(world: World) -> None:
    await world.host("host-a", gpus=4)
    job = await world.running("parameter_server")
    await world.set_job_status(job.id, JobStatus.cancelled)
    outbox = await world.run(FinishedJobs())
    stops = {(host, m.key.task) for host, m in outbox.messages if isinstance(m, StopTask)}
    assert stops == {("host-a", t.name) for t in job.tasks}
    assert all(
        isinstance(m, StopTask) and m.reason == f"job {job.id} is cancelled"
        for _, m in outbox.messages
    )
    # Told once; told again only after the resend period.
    assert (await world.run(FinishedJobs())).messages == []


async def test_tasks_that_never_started_are_stopped_without_a_command(world: World) -> None:
    job_id = await world.job("mirrored")
    await world.set_job_status(job_id, JobStatus.cancelled)
    outbox = await world.run(FinishedJobs())
    assert outbox.messages == []
    assert [t.status for t in (await world.load(job_id)).tasks] == [TaskStatus.stopped]


async def test_running_jobs_are_left_alone(world: World) -> None:
    await world.host("host-a")
    job = await world.running("mirrored")
    assert (await world.run(FinishedJobs())).messages == []
    assert [t.status for t in (await world.load(job.id)).tasks] == [TaskStatus.running]
