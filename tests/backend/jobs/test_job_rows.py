"""A stored job reads back typed: its spec as the JobSpec it was submitted as (validated once
per loaded value), its tasks' roles as Role; what is stored stays the plain JSON and strings."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncEngine

from agents.vocabulary import Role
from backend.db import session_factory
from backend.jobs.models import Job, Task
from backend.jobs.spec import validate_spec
from tests.support.factories import create_job, make_spec


async def test_a_jobs_spec_reads_as_the_submitted_model_once_per_stored_value(
    engine: AsyncEngine,
) -> None:
    submitted = validate_spec(make_spec("parameter_server", tags=["a"]))
    async with session_factory(engine)() as session:
        job_id = (await create_job(session=session, spec=submitted)).id
        await session.commit()
    async with session_factory(engine)() as session:
        job = await session.get_one(Job, job_id)
        assert job.spec == submitted.model_dump(mode="json")  # stored as its JSON
        first = job.job_spec
        assert first == submitted
        assert job.job_spec is first  # validated once, not per reader

        job.spec = {**job.spec, "description": "changed"}
        assert job.job_spec.description == "changed"  # a new value is read anew
        await session.commit()
    async with session_factory(engine)() as session:
        job = await session.get_one(Job, job_id)
        assert job.job_spec == submitted.model_copy(update={"description": "changed"})


async def test_task_roles_read_as_roles_and_are_stored_as_their_strings(
    engine: AsyncEngine,
) -> None:
    async with session_factory(engine)() as session:
        job_id = (await create_job(session=session, spec=validate_spec(make_spec()))).id
        await session.commit()
    async with session_factory(engine)() as session:
        tasks = list(
            await session.scalars(select(Task).where(Task.job_id == job_id).order_by(Task.id))
        )
        assert [(type(t.role), t.role) for t in tasks] == [
            (Role, Role.chief),
            (Role, Role.worker),
            (Role, Role.worker),
            (Role, Role.ps),
        ]
        stored = await session.execute(
            text("SELECT role FROM tasks WHERE job_id = :job ORDER BY id"), {"job": job_id}
        )
        assert [(type(role), role) for (role,) in stored] == [
            (str, "chief"),
            (str, "worker"),
            (str, "worker"),
            (str, "ps"),
        ]

        tasks[0].role = "boss"  # type: ignore[assignment]
        with pytest.raises(StatementError, match="'boss' is not a valid Role"):
            await session.flush()
