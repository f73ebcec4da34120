"""Tasks changed in one flush are written in one UPDATE per set of changed columns
(backend.jobs.task_writes), with their jobs' version check and the cluster board told of
them as when the flush writes them one by one, on SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm.exc import StaleDataError

from backend.db import PublishingSession, session_factory
from backend.hosts.models import Host
from backend.jobs.cluster_changes import BOARD, ClusterChanges, TaskRow
from backend.jobs.models import Job, Task
from backend.jobs.spec import JobSpec
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.lifecycle import transition_job
from tests.backend.conftest import count_updates
from tests.support.factories import create_job, make_host, make_spec

STARTED = datetime(2026, 11, 25, 3, 0, tzinfo=UTC)


async def stored(engine: AsyncEngine, jobs: int) -> tuple[list[int], int]:
    """Parameter-server jobs (four tasks each) and a host to place them on."""
    async with session_factory(engine)() as session:
        spec = JobSpec.model_validate(make_spec("parameter_server"))
        ids = [(await create_job(session=session, spec=spec)).id for _ in range(jobs)]
        host = await make_host(session, "host-a", gpus=8)
        await session.commit()
        return ids, host.id


async def tasks_of(session: AsyncSession, ids: list[int]) -> list[Task]:
    return list(await session.scalars(select(Task).where(Task.job_id.in_(ids)).order_by(Task.id)))


def place(tasks: list[Task], host_id: int) -> None:
    """What a placement pass writes: every column kind (JSON, enum, integer, time)."""
    for number, task in enumerate(tasks):
        task.host_id, task.port, task.gpu_indices = host_id, 41000 + number, [number % 8]
        task.tf_config = {"cluster": {"worker": [f"10.0.0.1:{41000 + number}"]}, "n": number}
        task.status, task.pid, task.exit_code = TaskStatus.scheduled, None, None
        task.started_at = STARTED


async def test_tasks_changed_alike_take_one_update_and_read_back_as_written(
    engine: AsyncEngine,
) -> None:
    ids, host_id = await stored(engine, 2)
    updates = count_updates(engine, "tasks")
    async with session_factory(engine)() as session:
        place(await tasks_of(session, ids), host_id)
        await session.commit()
    assert updates["tasks"] == 1
    async with session_factory(engine)() as session:
        tasks = await tasks_of(session, ids)
        assert len(tasks) == 8
        for number, task in enumerate(tasks):
            assert (task.host_id, task.port, task.gpu_indices) == (
                host_id,
                41000 + number,
                [number % 8],
            )
            assert task.tf_config == {
                "cluster": {"worker": [f"10.0.0.1:{41000 + number}"]},
                "n": number,
            }
            assert (task.status, task.pid, task.started_at) == (TaskStatus.scheduled, None, STARTED)


async def test_each_set_of_changed_columns_is_one_update_and_relationships_stay_with_the_orm(
    engine: AsyncEngine,
) -> None:
    ids, host_id = await stored(engine, 2)
    updates = count_updates(engine, "tasks")
    async with session_factory(engine)() as session:
        tasks = await tasks_of(session, ids)
        for task in tasks[:3]:
            task.status = TaskStatus.stopped
        for task in tasks[3:6]:
            task.status, task.exit_code = TaskStatus.failed, 3
        tasks[6].host = await session.get_one(Host, host_id)  # a relationship: the ORM's own
        await session.commit()
    assert updates["tasks"] == 3  # two shapes together, the relationship's task alone
    async with session_factory(engine)() as session:
        tasks = await tasks_of(session, ids)
        assert [t.status for t in tasks[:6]] == [TaskStatus.stopped] * 3 + [TaskStatus.failed] * 3
        assert [t.exit_code for t in tasks[3:6]] == [3, 3, 3]
        assert tasks[6].host_id == host_id and tasks[7].host_id is None


async def test_tasks_written_together_bump_their_jobs_versions(engine: AsyncEngine) -> None:
    ids, host_id = await stored(engine, 2)
    async with session_factory(engine)() as session:
        versions = [(await session.get_one(Job, i)).version for i in ids]
    async with session_factory(engine)() as session:
        place(await tasks_of(session, ids), host_id)
        await session.commit()
    async with session_factory(engine)() as session:
        assert [(await session.get_one(Job, i)).version for i in ids] == [v + 1 for v in versions]


async def test_tasks_changed_from_a_stale_read_of_their_job_fail_and_nothing_is_written(
    engine: AsyncEngine,
) -> None:
    ids, host_id = await stored(engine, 2)
    async with session_factory(engine)() as session, session_factory(engine)() as other:
        tasks = await tasks_of(session, ids)
        # Read with the tasks and held, as a pass holds them (the session's map is weak).
        jobs = [await session.get_one(Job, job_id) for job_id in ids]
        # Another writer cancels the second job after this session read it.
        elsewhere = await other.get_one(Job, ids[1])
        await transition_job(session=other, job=elsewhere, to=JobStatus.cancelled, reason="x")
        await other.commit()
        place(tasks, host_id)
        with pytest.raises(StaleDataError, match=rf"jobs \[{ids[1]}\] changed"):
            await session.commit()
        assert len(jobs) == 2
    async with session_factory(engine)() as session:
        assert {t.host_id for t in await tasks_of(session, ids)} == {None}


class Board:
    def __init__(self) -> None:
        self.told: list[ClusterChanges] = []

    def changed(self, changes: ClusterChanges) -> None:
        self.told.append(changes)


async def test_the_board_hears_of_each_task_as_written_and_the_flush_of_none(
    engine: AsyncEngine,
) -> None:
    """The cluster board learns of task changes as it would from the flush (backend.hosts.
    changes); the flush itself finds nothing left to do for them (no after_update)."""
    ids, host_id = await stored(engine, 2)
    board = Board()
    sessions = session_factory(engine, sync_session_class=PublishingSession, info={BOARD: board})
    flushed: list[int] = []

    def listener(_mapper: Any, _connection: Any, task: Task) -> None:
        flushed.append(task.id)

    event.listen(Task, "after_update", listener)
    try:
        async with sessions() as session:
            tasks = await tasks_of(session, ids)
            place(tasks, host_id)
            await session.flush()
            assert not any(session.is_modified(task) for task in tasks)
            await session.commit()
    finally:
        event.remove(Task, "after_update", listener)
    assert flushed == []
    [told] = board.told
    assert sorted(told.tasks.values(), key=lambda row: row.task_id) == [
        TaskRow(t.id, host_id, t.job_id, t.role, t.index, TaskStatus.scheduled, t.port, [n % 8])
        for n, t in enumerate(tasks)
    ]


async def test_a_task_written_together_and_changed_again_is_written_again(
    engine: AsyncEngine,
) -> None:
    ids, host_id = await stored(engine, 2)
    async with session_factory(engine)() as session:
        tasks = await tasks_of(session, ids)
        place(tasks, host_id)
        await session.flush()  # written together, and marked clean
        tasks[0].status, tasks[0].exit_code = TaskStatus.failed, 3
        await session.commit()
    async with session_factory(engine)() as session:
        again = await tasks_of(session, ids)
    assert (again[0].status, again[0].exit_code, again[0].port) == (TaskStatus.failed, 3, 41000)
    assert {t.status for t in again[1:]} == {TaskStatus.scheduled}
    assert [t.port for t in again] == [41000 + n for n in range(len(again))]
