"""Starts applied as rows and statements (backend.scheduling.started) keep the unit of work's
rules: a job's version is checked and bumped, objects the session holds stay true, the
cluster board is told what was written. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import selectinload
from sqlalchemy.orm.exc import StaleDataError

from backend.db import session_factory
from backend.hosts.changes import BOARD, ClusterChanges
from backend.hosts.models import Host
from backend.jobs.event_kinds import EventKind
from backend.jobs.models import Job, JobEvent, Task
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling import started
from backend.scheduling.transaction import Transaction
from backend.streams.events import PublishingSession
from tests.backend.scheduling.reconcilers.conftest import World


class Board:
    def __init__(self) -> None:
        self.told: list[ClusterChanges] = []

    def changed(self, changes: ClusterChanges) -> None:
        self.told.append(changes)


async def starts_of(world: World, job: Job) -> list[tuple[Host, Any, int]]:
    async with world.sessions() as session:
        host = await session.scalar(select(Host).where(Host.name == "host-a"))
    assert host is not None
    return [(host, task.key, 100 + n) for n, task in enumerate(job.tasks)]


async def test_every_start_written_bumps_the_jobs_version_and_tells_the_board(
    world: World,
) -> None:
    await world.host("host-a", gpus=4)
    job = await world.placed("parameter_server")
    starts = await starts_of(world, job)
    board = Board()
    engine = world.sessions.kw["bind"]
    sessions = session_factory(engine, sync_session_class=PublishingSession, info={BOARD: board})

    async with sessions() as session:  # all but one: the job waits for the last
        await started.mark_started_many(
            tx=Transaction(session=session, backend=world.backend), starts=starts[:-1]
        )
        await session.commit()
    waiting = await world.load(job.id)
    assert waiting.status is JobStatus.scheduled
    assert waiting.version == job.version + 1  # its tasks changed: so did it
    [told] = board.told
    assert {row.task_id: row.status for row in told.tasks.values()} == {
        task.id: TaskStatus.running for task in job.tasks[:-1]
    }

    async with sessions() as session:
        await started.mark_started_many(
            tx=Transaction(session=session, backend=world.backend), starts=starts
        )  # the others again (an agent's resent reports) change nothing
        await session.commit()
        events = list(
            await session.scalars(
                select(JobEvent).where(JobEvent.job_id == job.id).order_by(JobEvent.id)
            )
        )
    running = await world.load(job.id)
    assert running.status is JobStatus.running
    assert running.started_at is not None and running.version == job.version + 2
    assert [t.pid for t in running.tasks] == [100 + n for n in range(len(job.tasks))]
    assert [e.task for e in events if e.kind == EventKind.task_status] == [
        t.name for t in job.tasks
    ]
    assert (events[-1].from_status, events[-1].to_status) == ("scheduled", "running")
    assert len(board.told) == 2 and len(board.told[1].tasks) == 1


async def test_a_start_from_a_stale_read_of_its_job_writes_nothing(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    await world.host("host-a", gpus=4)
    job = await world.placed("parameter_server")
    starts = await starts_of(world, job)
    load = started._load

    async def stale(*args: Any) -> Any:  # as if another writer changed the job meanwhile
        jobs, tasks = await load(*args)
        for read in jobs.values():
            read.version -= 1
        return jobs, tasks

    monkeypatch.setattr(started, "_load", stale)
    with pytest.raises(StaleDataError):
        async with world.sessions() as session:
            await started.mark_started_many(
                tx=Transaction(session=session, backend=world.backend), starts=starts
            )
            await session.commit()
    after = await world.load(job.id)
    assert after.version == job.version and after.status is JobStatus.scheduled
    assert {t.status for t in after.tasks} == {TaskStatus.scheduled}


async def test_objects_the_session_holds_go_on_from_what_was_written(world: World) -> None:
    await world.host("host-a", gpus=4)
    job = await world.placed("parameter_server")
    starts = await starts_of(world, job)

    async with world.sessions() as session:
        held = await session.scalar(
            select(Job).where(Job.id == job.id).options(selectinload(Job.tasks))
        )
        assert held is not None
        await started.mark_started_many(
            tx=Transaction(session=session, backend=world.backend), starts=starts
        )
        assert held.status is JobStatus.running and held.version == job.version + 1
        assert {t.status for t in held.tasks} == {TaskStatus.running}
        # A later change through the object passes its version check and keeps the starts.
        held.reason = "changed after its starts"
        held.tasks[0].exit_code = 3
        await session.commit()
    after = await world.load(job.id)
    assert after.reason == "changed after its starts"
    assert after.status is JobStatus.running and after.version == job.version + 2
    assert {t.status for t in after.tasks} == {TaskStatus.running}
    assert [t.pid for t in after.tasks] == [100 + n for n in range(len(job.tasks))]
    assert isinstance(after.tasks[0], Task) and after.tasks[0].exit_code == 3
