"""A job's tasks and its events are inserted many rows to a statement, on both databases
(SQLite needs the tables' insert sentinels for it)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import event, select

from backend.db import create_engine, session_factory
from backend.jobs.events import EventKind, record_event
from backend.jobs.models import JobEvent, Task
from backend.jobs.spec import JobSpec
from backend.migrate import upgrade_database
from tests.conftest import make_settings
from tests.support.factories import create_job, make_spec


async def test_a_jobs_tasks_and_their_events_take_one_insert_each(
    database_url: str, tmp_path: Path
) -> None:
    engine = create_engine(make_settings(database_url, tmp_path / "data").resolved_database_url)
    await upgrade_database(engine)
    inserts: Counter[str] = Counter()

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("INSERT INTO"):
            inserts[statement.split()[2]] += 1

    event.listen(engine.sync_engine, "before_cursor_execute", count)
    try:
        async with session_factory(engine)() as session:
            spec = JobSpec.model_validate(make_spec("parameter_server"))
            job = await create_job(session=session, spec=spec)
            assert len(job.tasks) > 1
            for task in job.tasks:
                await record_event(
                    session=session,
                    job=job,
                    kind=EventKind.task_status,
                    message=f"{task.name} started",
                    task=task.name,
                    flush=False,
                )
            await session.commit()
            ids = [t.id for t in job.tasks]
            stored = await session.scalars(select(Task.id).where(Task.job_id == job.id))
            assert sorted(ids) == sorted(stored) and len(set(ids)) == len(ids)
            events = await session.scalars(select(JobEvent.task).where(JobEvent.job_id == job.id))
            assert sorted(t for t in events if t) == sorted(t.name for t in job.tasks)
            # Each task object got its own row's id back: the row with its name.
            by_id = {
                row.id: (row.role, row.index)
                for row in await session.execute(
                    select(Task.id, Task.role, Task.index).where(Task.job_id == job.id)
                )
            }
            assert all(by_id[t.id] == (t.role, t.index) for t in job.tasks)
        assert inserts["jobs"] == 1
        assert inserts["tasks"] == 1
        assert inserts["job_events"] == 2  # "created" (flushed alone), then the others together
    finally:
        await engine.dispose()
