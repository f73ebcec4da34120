"""ReportedStarts: starts agents reported are applied together; a start that should not have
happened is answered with a stop."""

from __future__ import annotations

from agents.protocol import StopTask, TaskKey
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.reconcilers.reported_starts import ReportedStarts
from tests.backend.scheduling.reconcilers.conftest import World


async def test_the_job_runs_once_every_task_has_started(world: World) -> None:
    await world.host("host-a", gpus=4)
    job = await world.placed("parameter_server")
    first, *rest = job.tasks
    world.view.reported_starts["host-a"] = [(first.key, 11)]
    await world.run(ReportedStarts(view=world.view))
    assert (await world.load(job.id)).status is JobStatus.scheduled
    world.view.reported_starts["host-a"] = [(t.key, 12 + n) for n, t in enumerate(rest)]
    outbox = await world.run(ReportedStarts(view=world.view))
    assert outbox.messages == []
    running = await world.load(job.id)
    assert running.status is JobStatus.running
    assert {t.status for t in running.tasks} == {TaskStatus.running}
    assert running.tasks[0].pid == 11
    assert world.view.reported_starts == {}


async def test_a_start_of_a_cancelled_job_is_stopped(world: World) -> None:
    await world.host("host-a")
    job = await world.placed("mirrored")
    await world.set_job_status(job.id, JobStatus.cancelled)
    world.view.reported_starts["host-a"] = [(job.tasks[0].key, 11)]
    outbox = await world.run(ReportedStarts(view=world.view))
    [(host, stop)] = outbox.messages
    assert host == "host-a" and isinstance(stop, StopTask)
    assert stop.key == job.tasks[0].key
    assert (await world.load(job.id)).status is JobStatus.cancelled


async def test_a_start_of_another_hosts_task_is_refused(world: World) -> None:
    await world.host("host-a")
    await world.host("host-b")
    job = await world.placed("mirrored")
    other = "host-b" if job.tasks[0].host and job.tasks[0].host.name == "host-a" else "host-a"
    world.view.reported_starts[other] = [(job.tasks[0].key, 11)]
    outbox = await world.run(ReportedStarts(view=world.view))
    assert [(h, type(m)) for h, m in outbox.messages] == [(other, StopTask)]
    assert [t.status for t in (await world.load(job.id)).tasks] == [TaskStatus.scheduled]


async def test_an_unknown_attempt_is_stopped(world: World) -> None:
    await world.host("host-a")
    stray = TaskKey(job_id=999, task="chief:0", attempt=0)
    world.view.reported_starts["host-a"] = [(stray, 11)]
    outbox = await world.run(ReportedStarts(view=world.view))
    assert [m.key for _, m in outbox.messages if isinstance(m, StopTask)] == [stray]
