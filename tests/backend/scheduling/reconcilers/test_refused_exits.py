"""A task that stopped itself for good (TaskExit.refused) fails its job with its reason, and
is not restarted even though the spec's policy would restart any other failure."""

from __future__ import annotations

import pytest

from agents.protocol import TaskExit
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.task_events import apply_exit
from backend.scheduling.transaction import Transaction
from tests.backend.scheduling.reconcilers.conftest import World

KERAS_REASON = "Keras 3 cannot train under multi_worker_mirrored; use tf_keras"


async def exit_first_task(world: World, job_id: int, exit: TaskExit) -> None:
    job = await world.load(job_id)
    task = job.tasks[0]
    assert task.host is not None
    async with world.sessions() as session:
        tx = Transaction(session=session, executors=world.executors)
        await apply_exit(tx=tx, host=task.host, exit=exit)
        await session.commit()


@pytest.mark.parametrize("refused", [KERAS_REASON, None])
async def test_a_refusal_fails_the_job_at_once_with_its_reason(
    world: World, refused: str | None
) -> None:
    await world.host("host-a")
    job = await world.running("mirrored", restart={"policy": "on_failure", "max_restarts": 3})
    key = job.tasks[0].key
    await exit_first_task(world, job.id, TaskExit(key=key, exit_code=78, refused=refused))

    job = await world.load(job.id)
    if refused is None:  # the same exit without a refusal is retried by the policy
        assert job.restart_count == 1
        assert job.tasks[0].attempt == 1
        return
    assert job.status is JobStatus.failed
    assert job.restart_count == 0
    assert job.tasks[0].status is TaskStatus.failed
    assert job.reason == f"chief:0 stopped for good: {KERAS_REASON}"
