"""RunningTasks: a heartbeat's report is compared with what the host should run; the
difference becomes stops, starts and exits; a host that agrees is settled."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from agents.protocol import RunningTask, StartTask, StopTask, TaskKey
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.reconcilers.running_tasks import RunningTasks, agreeing
from tests.backend.scheduling.reconcilers.conftest import World


def compare(world: World, host: str, running: list[RunningTask]) -> RunningTasks:
    world.view.to_compare[host] = running
    return RunningTasks(view=world.view)


async def test_a_host_that_runs_what_it_should_is_settled(world: World) -> None:
    await world.host("host-a")
    job = await world.running("mirrored")
    report = [RunningTask(key=job.tasks[0].key, pid=100)]
    outbox = await world.run(compare(world, "host-a", report))
    assert outbox.messages == []
    assert "host-a" in world.view.settled
    assert world.view.running.of("host-a") == frozenset({job.tasks[0].key})


async def test_an_attempt_that_should_not_run_is_stopped(world: World) -> None:
    await world.host("host-a")
    stray = TaskKey(job_id=4242, task="worker:0", attempt=3)
    outbox = await world.run(compare(world, "host-a", [RunningTask(key=stray, pid=7)]))
    [(host, stop)] = outbox.messages
    assert host == "host-a" and isinstance(stop, StopTask) and stop.key == stray
    assert "host-a" not in world.view.settled


async def test_a_running_task_the_host_no_longer_reports_has_exited(world: World) -> None:
    await world.host("host-a")
    job = await world.running("mirrored", restart={"policy": "never"})
    await world.run(compare(world, "host-a", []))
    failed = await world.load(job.id)
    assert failed.status is JobStatus.failed
    assert failed.reason == "chief:0 is gone: host-a no longer runs it"
    assert [t.status for t in failed.tasks] == [TaskStatus.failed]


async def test_a_task_gone_with_its_agents_restart_is_restarted_as_infrastructure(
    world: World,
) -> None:
    # Its agent was restarted (killed, then started again before the host was lost): no exit
    # came. That is not a task that could not start; the restart policy applies to it.
    await world.host("host-a")
    job = await world.running("parameter_server")
    worker = next(t for t in job.tasks if t.name == "worker:0")
    others = [RunningTask(key=t.key, pid=100 + n) for n, t in enumerate(job.tasks) if t != worker]
    await world.run(compare(world, "host-a", others))
    after = await world.load(job.id)
    assert after.status is JobStatus.running
    restarted = next(t for t in after.tasks if t.name == "worker:0")
    assert restarted.attempt == worker.attempt + 1


async def test_a_scheduled_task_not_running_yet_is_started(world: World) -> None:
    await world.host("host-a")
    job = await world.placed("mirrored")
    world.agents.sent([("start", job.tasks[0].key)])  # placement sent it just now
    assert (await world.run(compare(world, "host-a", []))).messages == []  # not due yet
    world.agents._sent.clear()  # the resend period has passed
    outbox = await world.run(compare(world, "host-a", []))
    assert [(h, type(m)) for h, m in outbox.messages] == [("host-a", StartTask)]


async def test_a_start_whose_report_was_lost_is_applied(world: World) -> None:
    await world.host("host-a")
    job = await world.placed("mirrored")
    report = [RunningTask(key=job.tasks[0].key, pid=55)]
    await world.run(compare(world, "host-a", report))
    running = await world.load(job.id)
    assert running.status is JobStatus.running
    assert running.tasks[0].pid == 55


async def test_tasks_of_an_ended_job_not_running_any_more_are_stopped(world: World) -> None:
    await world.host("host-a")
    job = await world.running("mirrored")
    await world.set_job_status(job.id, JobStatus.cancelled)
    await world.run(compare(world, "host-a", []))
    assert [t.status for t in (await world.load(job.id)).tasks] == [TaskStatus.stopped]


async def test_agreement_is_exactly_every_attempt_placed_there_running_and_nothing_else(
    world: World,
) -> None:
    a, b = await world.host("host-a"), await world.host("host-b")
    job = await world.running("mirrored")
    assert job.tasks[0].host_id == a.id
    key = job.tasks[0].key
    waiting = await world.placed("mirrored")  # on host-b, not started yet
    assert waiting.tasks[0].host_id == b.id
    stray = TaskKey(job_id=4242, task="worker:0", attempt=0)
    later = TaskKey(job_id=key.job_id, task=key.task, attempt=key.attempt + 1)
    cases = {
        "exactly it": ([key], {a.id}),
        "nothing": ([], set()),
        "it and a stray": ([key, stray], set()),
        "another attempt": ([later], set()),
    }
    for name, (keys, expected) in cases.items():
        report = {a.id: [RunningTask(key=k, pid=1) for k in keys]}
        async with world.sessions() as session:
            assert await agreeing(session, report) == expected, name
    # An attempt placed but not running yet, and one of a job that has ended: not settled
    # from rows alone (the full comparison applies the start, or stops it).
    await world.set_job_status(job.id, JobStatus.cancelled)
    report = {
        a.id: [RunningTask(key=key, pid=1)],
        b.id: [RunningTask(key=waiting.tasks[0].key, pid=2)],
    }
    async with world.sessions() as session:
        assert await agreeing(session, report) == set()


async def test_a_host_in_agreement_is_settled_without_loading_its_tasks(world: World) -> None:
    await world.host("host-a")
    job = await world.running("parameter_server")
    report = [RunningTask(key=t.key, pid=100 + n) for n, t in enumerate(job.tasks)]
    loads: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "tasks.tf_config" in statement:  # a full task row, as the ORM loads it
            loads.append(statement)

    engine = world.sessions.kw["bind"].sync_engine
    event.listen(engine, "before_cursor_execute", note)
    try:
        outbox = await world.run(compare(world, "host-a", report))
    finally:
        event.remove(engine, "before_cursor_execute", note)
    assert outbox.messages == [] and "host-a" in world.view.settled
    assert loads == []
