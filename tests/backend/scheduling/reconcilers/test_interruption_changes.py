"""The changes an interruption applies once its checkpoint is known (vacate, preempt):
each sends the job back to the queue with no restart counted, and none applies to a job
that has moved on meanwhile."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from agents.protocol import StopTask
from backend.jobs.models import Task
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.interruptions import ResumePoint, preempt, tasks_to_move
from backend.scheduling.interruptions import vacate as vacate_host
from backend.scheduling.transaction import Transaction
from tests.backend.scheduling.reconcilers.conftest import World

CHECKPOINTED = ResumePoint("chief:0", 0, "ckpt-3", 60)
vacate = functools.partial(
    vacate_host,
    attempts=frozenset({("chief:0", 0)}),
    why="host-a is leaving (its agent was told to stop)",
    cause="notice",
)


async def applied(world: World, change: Callable[[Transaction], Awaitable[bool]]) -> bool:
    async with world.sessions() as session:
        tx = Transaction(session=session, executors=world.executors)
        done = await change(tx)
        await session.commit()
    world.agents.send(tx.outbox)
    return done


async def test_a_job_on_a_leaving_host_goes_back_to_the_queue_and_its_tasks_are_stopped(
    world: World,
) -> None:
    await world.host("host-a", gpus=2)
    job = await world.running("mirrored")
    elsewhere = await applied(
        world, lambda tx: vacate(tx, job_id=job.id, host="host-b", point=CHECKPOINTED)
    )
    assert not elsewhere  # none of its tasks is there
    assert await applied(
        world, lambda tx: vacate(tx, job_id=job.id, host="host-a", point=CHECKPOINTED)
    )
    moved = await world.load(job.id)
    assert moved.status is JobStatus.pending
    assert moved.reason == (
        "host-a is leaving (its agent was told to stop); resumes from checkpoint ckpt-3 at "
        "step 60 (0 steps lost)"
    )
    assert (moved.restart_count, moved.failure_count) == (0, 0)
    assert [(t.status.value, t.attempt, t.host_id) for t in moved.tasks] == [("pending", 1, None)]
    stops = [(host, m.key.attempt) for host, m in world.hub.sent if isinstance(m, StopTask)]
    assert stops == [("host-a", 0)]
    # Applied twice (a second notice): nothing more happens.
    assert not await applied(
        world, lambda tx: vacate(tx, job_id=job.id, host="host-a", point=CHECKPOINTED)
    )


async def test_a_notice_for_an_earlier_attempt_leaves_the_next_one_where_it_is(
    world: World,
) -> None:
    """A notice's checkpoint may come back only after the job went back to the queue for
    another reason and was placed again on a host of the same name (a requeued Slurm job's
    agents are named after it): that run is not the one the notice was about."""
    await world.host("host-a", gpus=2)
    job = await world.running("mirrored")
    await world.set_task(job.tasks[0].id, attempt=1)
    assert not await applied(
        world, lambda tx: vacate(tx, job_id=job.id, host="host-a", point=CHECKPOINTED)
    )
    assert (await world.load(job.id)).status is JobStatus.running


async def test_no_preemption_for_a_job_that_is_no_longer_pending(world: World) -> None:
    await world.host("host-a", gpus=2)
    low = await world.running("mirrored")
    high = await world.job("mirrored", priority=5)
    await world.set_job_status(high, JobStatus.cancelled)
    assert not await applied(
        world, lambda tx: preempt(tx, job_id=low.id, by_id=high, point=CHECKPOINTED)
    )
    assert (await world.load(low.id)).status is JobStatus.running


def tasks(*names: str) -> list[Task]:
    made = []
    for name in names:
        role, index = name.split(":")
        made.append(Task(role=role, index=int(index), status=TaskStatus.running))
    return made


def test_what_moves_off_a_host_under_each_strategy() -> None:
    _, ps, w0, w1, evaluator = job = tasks("chief:0", "ps:0", "worker:0", "worker:1", "evaluator:0")

    def names(moved: list[Task]) -> list[str]:
        return sorted(t.name for t in moved)

    # Workers only: they and the chief (it reaches its workers at start); the ps serve on.
    assert names(tasks_to_move("parameter_server", "chief", [w0, w1], job)) == [
        "chief:0",
        "worker:0",
        "worker:1",
    ]
    # The evaluator alone moves alone; a ps or the chief there takes the whole job.
    assert tasks_to_move("parameter_server", "chief", [evaluator], job) == [evaluator]
    assert names(tasks_to_move("parameter_server", "chief", [ps, w0], job)) == names(job)
    # Other strategies, and a job whose coordinator is a client, move whole.
    assert names(tasks_to_move("multi_worker_mirrored", "chief", [w0], job)) == names(job)
    assert names(tasks_to_move("parameter_server", "client", [w0], job)) == names(job)
