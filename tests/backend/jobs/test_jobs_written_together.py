"""Jobs changed in one flush are written in one UPDATE with the same version check as one at a
time (backend.jobs.versioning), on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm.exc import StaleDataError

from backend.db import session_factory
from backend.jobs.models import Job, Task
from backend.jobs.spec import JobSpec
from backend.jobs.states import JobStatus, TaskStatus
from backend.jobs.versioning import PAGE, versioned_update
from backend.scheduling.lifecycle import transition_job
from tests.backend.conftest import count_updates
from tests.support.factories import create_job, make_spec


async def stored_jobs(engine: AsyncEngine, count: int) -> list[int]:
    async with session_factory(engine)() as session:
        spec = JobSpec.model_validate(make_spec("parameter_server"))
        jobs = [await create_job(session=session, spec=spec) for _ in range(count)]
        await session.commit()
        return [job.id for job in jobs]


async def loaded(session: AsyncSession, ids: list[int]) -> list[Job]:
    jobs = {job.id: job for job in await session.scalars(select(Job).where(Job.id.in_(ids)))}
    return [jobs[i] for i in ids]


async def test_jobs_changed_together_take_one_update_and_each_its_version(
    engine: AsyncEngine,
) -> None:
    ids = await stored_jobs(engine, 3)
    updates = count_updates(engine, "jobs")
    async with session_factory(engine)() as session:
        jobs = await loaded(session, ids)
        versions = [job.version for job in jobs]
        for job in jobs:
            await transition_job(
                session=session, job=job, to=JobStatus.scheduled, reason="placed", flush=False
            )
        await session.commit()
    assert updates["jobs"] == 1
    async with session_factory(engine)() as session:
        jobs = await loaded(session, ids)
        assert [job.version for job in jobs] == [v + 1 for v in versions]
        assert {(job.status, job.reason) for job in jobs} == {(JobStatus.scheduled, "placed")}


async def test_a_task_change_bumps_its_jobs_version_in_the_same_update(
    engine: AsyncEngine,
) -> None:
    ids = await stored_jobs(engine, 2)
    updates = count_updates(engine, "jobs")
    async with session_factory(engine)() as session:
        jobs = await loaded(session, ids)
        versions = [job.version for job in jobs]
        tasks = await session.scalars(select(Task).where(Task.job_id.in_(ids)))
        for task in tasks:
            task.status = TaskStatus.stopped
        await session.commit()
    assert updates["jobs"] == 1
    async with session_factory(engine)() as session:
        assert [job.version for job in await loaded(session, ids)] == [v + 1 for v in versions]


async def test_one_stale_job_fails_the_flush_and_nothing_is_written(engine: AsyncEngine) -> None:
    ids = await stored_jobs(engine, 3)
    async with session_factory(engine)() as session, session_factory(engine)() as other:
        jobs = await loaded(session, ids)
        # Another writer changes the second job after this session read it.
        elsewhere = await other.get_one(Job, ids[1])
        await transition_job(session=other, job=elsewhere, to=JobStatus.cancelled, reason="x")
        await other.commit()
        for job in jobs:
            job.reason = "from a stale read of the second job"
        with pytest.raises(StaleDataError, match=rf"jobs \[{ids[1]}\] changed"):
            await session.commit()
    async with session_factory(engine)() as session:
        reasons = {job.id: job.reason for job in await loaded(session, ids)}
        assert reasons[ids[1]] == "x"
        assert "from a stale read of the second job" not in reasons.values()


async def test_a_job_with_other_changes_is_written_by_itself(engine: AsyncEngine) -> None:
    ids = await stored_jobs(engine, 3)
    updates = count_updates(engine, "jobs")
    async with session_factory(engine)() as session:
        jobs = await loaded(session, ids)
        for job in jobs:
            job.reason = "noted"
        jobs[0].spec = {**jobs[0].spec, "description": "changed"}  # not a TOGETHER column
        await session.commit()
    assert updates["jobs"] == 2  # the other two together, the first alone
    async with session_factory(engine)() as session:
        jobs = await loaded(session, ids)
        assert {job.reason for job in jobs} == {"noted"}
        assert jobs[0].spec["description"] == "changed"


async def test_each_job_gets_its_own_values_from_a_padded_statement(engine: AsyncEngine) -> None:
    ids = await stored_jobs(engine, 5)  # written by the statement for eight rows
    async with session_factory(engine)() as session:
        for job in await loaded(session, ids):
            job.reason = f"reason of job {job.id}"
        await session.commit()
    async with session_factory(engine)() as session:
        assert [job.reason for job in await loaded(session, ids)] == [
            f"reason of job {job_id}" for job_id in ids
        ]


def test_a_statement_serves_every_page_up_to_its_size() -> None:
    def page(count: int) -> list[tuple[int, int, dict[str, object]]]:
        return [(job_id, 1, {"reason": "r"}) for job_id in range(1, count + 1)]

    five, eight, nine = (versioned_update(["reason"], page(n)) for n in (5, 8, 9))
    assert five.statement is eight.statement
    assert nine.statement is not eight.statement
    # The rows past the jobs match no job.
    assert [five.parameters[f"row{n}_id"] for n in range(8)] == [1, 2, 3, 4, 5, -1, -1, -1]
    assert versioned_update(["reason"], page(PAGE)).parameters[f"row{PAGE - 1}_id"] == PAGE
    for count in (0, PAGE + 1):
        with pytest.raises(ValueError, match=f"1 to {PAGE} jobs, not {count}"):
            versioned_update(["reason"], page(count))
