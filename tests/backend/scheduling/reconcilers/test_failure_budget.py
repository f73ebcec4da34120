"""Only failures spend a job's restart budget (spec.restart.max_restarts) and its backoff:
restarts a user asked for, and a Slurm requeue (its allocation's agents stopping), count as
restarts and attempts, not as failures."""

from __future__ import annotations

from sqlalchemy import select

from agents.protocol import TaskExit
from backend.jobs.models import Job, JobEvent, Task
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.reconcilers.pending_jobs import PendingJobs
from backend.scheduling.reconcilers.reported_starts import ReportedStarts
from backend.scheduling.restarts import request_job_restart, request_task_restart
from backend.scheduling.task_events import apply_exit
from backend.scheduling.transaction import Transaction
from tests.backend.scheduling.reconcilers.conftest import World

POLICY = {"policy": "on_failure", "max_restarts": 3, "backoff_seconds": 2}


def task_named(job: Job, name: str) -> Task:
    return next(t for t in job.tasks if t.name == name)


async def report_started(world: World, job_id: int) -> Job:
    """The agents report every scheduled attempt of the job started."""
    job = await world.load(job_id)
    for task in job.tasks:
        if task.status is TaskStatus.scheduled and task.host is not None:
            reported = world.view.reported_starts.setdefault(task.host.name, [])
            reported.append((task.key, 100 + task.attempt))
    await world.run(ReportedStarts(view=world.view))
    return await world.load(job_id)


async def restart_job_by_request(world: World, job_id: int) -> Job:
    """The user restarts the job; it is placed again and its tasks start."""
    async with world.sessions() as session:
        await request_job_restart(
            Transaction(session=session, executors=world.executors), job_id=job_id
        )
        await session.commit()
    world.view.capacity_changed()  # as the controller does: the old attempts freed their GPUs
    await world.run(PendingJobs(view=world.view, wake=lambda: None))
    job = await report_started(world, job_id)
    assert job.status is JobStatus.running, job.reason
    return job


async def restart_task_by_request(world: World, job_id: int, name: str) -> Job:
    """The user restarts one task; its new attempt (and its companions') start."""
    async with world.sessions() as session:
        tx = Transaction(session=session, executors=world.executors)
        await request_task_restart(tx, job_id=job_id, task_name=name)
        await session.commit()
    job = await report_started(world, job_id)
    assert job.status is JobStatus.running, job.reason
    return job


async def fail(
    world: World, job_id: int, name: str, exit_code: int = 1, *, agent_stopping: bool = False
) -> Job:
    """The task's current attempt exits with `exit_code` (its agent stopping, if said)."""
    task = task_named(await world.load(job_id), name)
    assert task.host is not None
    exit = TaskExit(key=task.key, exit_code=exit_code, agent_stopping=agent_stopping)
    async with world.sessions() as session:
        tx = Transaction(session=session, executors=world.executors)
        await apply_exit(tx=tx, host=task.host, exit=exit)
        await session.commit()
    return await world.load(job_id)


async def test_a_job_restarted_three_times_by_its_user_is_restarted_after_a_failure(
    world: World,
) -> None:
    await world.host("host-a")
    job = await world.running("mirrored", restart=POLICY)
    for _ in range(3):
        job = await restart_job_by_request(world, job.id)
    assert job.restart_count == 3

    job = await fail(world, job.id, "chief:0")
    assert job.status is JobStatus.restarting, job.reason
    assert (job.restart_count, job.failure_count) == (4, 1)
    chief = task_named(job, "chief:0")
    assert (chief.attempt, chief.failure_count, chief.status) == (4, 1, TaskStatus.scheduled)
    # The first failure's backoff (the base), not the fourth restart's (eight times it).
    assert job.reason is not None
    assert job.reason.endswith("restarting chief:0 in 2s (restart 1 of 3)"), job.reason


async def test_a_task_restarted_by_its_user_keeps_its_budget_for_failures(world: World) -> None:
    await world.host("host-a", gpus=4)
    job = await world.running("parameter_server", restart=POLICY)
    for _ in range(3):
        job = await restart_task_by_request(world, job.id, "worker:1")
    worker = task_named(job, "worker:1")
    assert worker.attempt == 3

    job = await fail(world, job.id, "worker:1")
    assert job.status is JobStatus.running, job.reason  # restarted alone, the job goes on
    worker = task_named(job, "worker:1")
    assert (worker.attempt, worker.failure_count, worker.status) == (4, 1, TaskStatus.scheduled)
    assert job.failure_count == 0
    async with world.sessions() as session:
        messages = list(
            await session.scalars(
                select(JobEvent.message)
                .where(JobEvent.job_id == job.id, JobEvent.kind == "restart")
                .order_by(JobEvent.id)
            )
        )
    assert messages[-1] is not None
    assert messages[-1].endswith("restarting worker:1 alone in 2s (attempt 4), the job goes on")


async def test_a_job_level_task_restart_by_request_is_no_failure(world: World) -> None:
    await world.host("host-a")
    job = await world.running("mirrored", restart=POLICY)
    for _ in range(3):
        job = await restart_task_by_request(world, job.id, "chief:0")
    assert job.restart_count == 3
    job = await fail(world, job.id, "chief:0")
    assert job.status is JobStatus.restarting, job.reason
    assert (job.restart_count, job.failure_count) == (4, 1)


async def test_failures_still_end_the_job_after_max_restarts(world: World) -> None:
    await world.host("host-a")
    job = await world.running("mirrored", restart={**POLICY, "max_restarts": 2})
    job = await restart_job_by_request(world, job.id)  # in between: changes nothing below
    for failures in (1, 2):
        job = await fail(world, job.id, "chief:0")
        assert job.status is JobStatus.restarting, job.reason
        assert job.failure_count == failures
        job = await report_started(world, job.id)
    job = await fail(world, job.id, "chief:0")
    assert job.status is JobStatus.failed
    assert job.reason is not None and job.reason.endswith("gave up after 2 restarts"), job.reason
    assert (job.restart_count, job.failure_count) == (3, 2)


async def test_a_failed_job_restarted_by_its_user_has_its_whole_budget_again(
    world: World,
) -> None:
    await world.host("host-a")
    job = await world.running("mirrored", restart={**POLICY, "max_restarts": 1})
    job = await fail(world, job.id, "chief:0")
    job = await report_started(world, job.id)
    job = await fail(world, job.id, "chief:0")
    assert job.status is JobStatus.failed, job.reason

    job = await restart_job_by_request(world, job.id)
    assert (job.restart_count, job.failure_count) == (2, 0)
    assert task_named(job, "chief:0").failure_count == 0
    job = await fail(world, job.id, "chief:0")
    assert job.status is JobStatus.restarting, job.reason
    assert job.failure_count == 1


async def test_a_task_failing_alone_still_ends_the_job_after_max_restarts(world: World) -> None:
    await world.host("host-a", gpus=4)
    job = await world.running("parameter_server", restart={**POLICY, "max_restarts": 1})
    job = await restart_task_by_request(world, job.id, "worker:0")
    job = await fail(world, job.id, "worker:0")
    assert job.status is JobStatus.running, job.reason
    job = await report_started(world, job.id)
    job = await fail(world, job.id, "worker:0")
    assert job.status is JobStatus.failed
    assert job.reason is not None
    assert job.reason.endswith("gave up after 1 restarts of worker:0"), job.reason


SLURM = {"partition": "debug"}


async def test_requeues_of_a_slurm_job_cost_it_no_failures_nor_restarts(world: World) -> None:
    await world.host("slurm-7-n1")
    job_id = await world.job("mirrored", restart=POLICY, slurm=SLURM)
    world.hub.bound["slurm-7-n1"] = job_id  # the agent its allocation started
    await world.run(PendingJobs(view=world.view, wake=lambda: None))
    job = await report_started(world, job_id)
    for requeues in (1, 2, 3):
        # Slurm requeues the job: the agent stops, and says so with its tasks' exits.
        job = await fail(world, job_id, "chief:0", exit_code=-15, agent_stopping=True)
        assert job.status is JobStatus.pending, job.reason
        assert (job.restart_count, job.failure_count) == (0, 0)  # an interruption
        chief = task_named(job, "chief:0")
        assert (chief.attempt, chief.failure_count, chief.host_id) == (requeues, 0, None)
        assert world.hub.stopping == {"slurm-7-n1"}  # nothing is placed on it meanwhile
        # Slurm runs it again: the allocation's agent joins anew and the job is placed.
        world.hub.stopping.clear()
        world.view.capacity_changed()
        await world.run(PendingJobs(view=world.view, wake=lambda: None))
        job = await report_started(world, job_id)
        assert job.status is JobStatus.running, job.reason

    job = await fail(world, job_id, "chief:0")  # a real failure: its budget is whole
    assert job.status is JobStatus.restarting, job.reason
    assert (job.restart_count, job.failure_count) == (1, 1)


async def test_a_stopping_native_agent_still_costs_its_jobs_a_failure(world: World) -> None:
    await world.host("host-a")
    job = await world.running("mirrored", restart=POLICY)
    job = await fail(world, job.id, "chief:0", exit_code=-15, agent_stopping=True)
    assert job.status is JobStatus.restarting, job.reason
    assert (job.restart_count, job.failure_count) == (1, 1)
    assert world.hub.stopping == {"host-a"}
    assert not world.hub.takes_tasks("host-a")
