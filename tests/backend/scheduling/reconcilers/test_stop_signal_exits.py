"""A task that saved on a stop signal and exited (TaskExit.interrupted: under
multi_worker_mirrored a SIGTERM to any worker from outside Strata) sends its job back to be
placed again, to resume from that backup: an interruption, whatever the spec's restart policy,
with nothing counted against its budget."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from agents.protocol import TaskExit
from backend.jobs.models import JobEvent
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.task_events import apply_exit
from backend.scheduling.transaction import Transaction
from tests.backend.scheduling.reconcilers.conftest import World
from tests.backend.scheduling.reconcilers.test_refused_exits import exit_first_task

NOTE = "was told to stop and backed up with the other workers at the same step"


@pytest.mark.parametrize("policy", ["on_failure", "never"])
async def test_a_save_on_a_stop_signal_sends_the_job_back_with_nothing_counted(
    world: World, policy: str
) -> None:
    host = await world.host("host-a")
    job = await world.running(
        "multi_worker_mirrored", restart={"policy": policy, "max_restarts": 3}
    )
    first, second = job.tasks[0], job.tasks[1]
    await exit_first_task(world, job.id, TaskExit(key=first.key, exit_code=42, interrupted=NOTE))

    job = await world.load(job.id)
    assert job.status is JobStatus.pending
    assert (job.restart_count, job.failure_count) == (0, 0)
    assert job.reason == f"{first.name} {NOTE}; resumes from that backup"
    assert all(t.status is TaskStatus.pending and t.attempt == 1 for t in job.tasks)
    assert all(t.failure_count == 0 for t in job.tasks)
    async with world.sessions() as session:
        event = await session.scalar(
            select(JobEvent).where(JobEvent.job_id == job.id).order_by(JobEvent.id.desc())
        )
    assert event is not None and event.data["interruption"] == "stop_signal"

    # The other worker's exit, of the attempt already sent back, changes nothing.
    async with world.sessions() as session:
        tx = Transaction(session=session, executors=world.executors)
        other = TaskExit(key=second.key, exit_code=42, interrupted=NOTE)
        await apply_exit(tx=tx, host=host, exit=other)
        await session.commit()
    again = await world.load(job.id)
    assert (again.status, again.reason) == (JobStatus.pending, job.reason)
    assert [t.attempt for t in again.tasks] == [1, 1]


async def test_the_same_exit_without_the_note_is_a_failure(world: World) -> None:
    await world.host("host-a")
    job = await world.running(
        "multi_worker_mirrored", restart={"policy": "on_failure", "max_restarts": 3}
    )
    await exit_first_task(world, job.id, TaskExit(key=job.tasks[0].key, exit_code=42))
    job = await world.load(job.id)
    assert (job.restart_count, job.failure_count) == (1, 1)
