"""Optimistic concurrency on jobs: a write based on a stale read fails, and the controller
applies the change again on fresh state. On SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import selectinload
from sqlalchemy.orm.exc import StaleDataError

from backend.jobs.lifecycle import transition_job
from backend.jobs.models import Job, Task
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.controller import Controller
from backend.scheduling.transaction import Transaction
from tests.conftest import Api
from tests.support.factories import make_spec


async def submitted(api: Api) -> int:
    response = await api.http.post("/jobs", json=make_spec("mirrored"))
    assert response.status_code == 201, response.text
    job_id: int = response.json()["id"]
    return job_id


async def cancel_elsewhere(api: Api, job_id: int) -> None:
    """What another writer does meanwhile, in its own transaction (applied again if the
    controller's pass, which notes why the job waits, changed the job under it too)."""
    for _ in range(5):
        async with api.session() as other:
            job = await other.get_one(Job, job_id)
            try:
                await transition_job(
                    session=other, job=job, to=JobStatus.cancelled, reason="elsewhere"
                )
                await other.commit()
            except StaleDataError:
                continue
            return
    raise AssertionError(f"job {job_id} changed under every try to cancel it")


async def test_a_write_from_a_stale_read_fails(api: Api) -> None:
    job_id = await submitted(api)
    async with api.session() as session:
        job = await session.get_one(Job, job_id)
        version = job.version
        await cancel_elsewhere(api, job_id)
        job.reason = "written from what was read before the cancel"
        with pytest.raises(StaleDataError):
            await session.commit()
    async with api.session() as session:
        job = await session.get_one(Job, job_id)
        assert (job.status, job.reason) == (JobStatus.cancelled, "elsewhere")
        assert job.version > version


async def test_a_change_to_a_task_is_checked_against_its_jobs_version(api: Api) -> None:
    job_id = await submitted(api)
    async with api.session() as session:
        # Read as every path that changes a task reads it: with its job.
        job = await session.get_one(Job, job_id, options=[selectinload(Job.tasks)])
        chief = job.tasks[0]
        await cancel_elsewhere(api, job_id)
        chief.status = TaskStatus.scheduled  # what a placement from the stale view would do
        with pytest.raises(StaleDataError):
            await session.commit()
    async with api.session() as session:
        statuses = await session.scalars(select(Task.status).where(Task.job_id == job_id))
        # Pending, or stopped by the controller since the job is over; never placed.
        assert list(statuses) in ([TaskStatus.pending], [TaskStatus.stopped])


async def test_the_controller_applies_a_change_again_on_fresh_state(api: Api) -> None:
    job_id = await submitted(api)
    controller: Controller = api.app.state.controller  # type: ignore[attr-defined]
    seen: list[JobStatus] = []

    async def schedule(tx: Transaction) -> None:
        session = tx.session
        job = await session.get_one(Job, job_id)
        seen.append(job.status)
        if len(seen) == 1:
            await cancel_elsewhere(api, job_id)  # lands between this read and this write
        if job.status is JobStatus.pending:
            await transition_job(session=session, job=job, to=JobStatus.scheduled)

    await controller.apply(schedule)
    # The first try read pending and was refused at commit; the second read cancelled.
    assert seen == [JobStatus.pending, JobStatus.cancelled]
    async with api.session() as session:
        assert (await session.get_one(Job, job_id)).status is JobStatus.cancelled


async def test_the_cancel_route_stops_what_runs_at_once(api: Api) -> None:
    job_id = await submitted(api)
    response = await api.http.post(f"/jobs/{job_id}/cancel")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "cancelled"
    assert [t["status"] for t in response.json()["tasks"]] == ["stopped"]
    again = await api.http.post(f"/jobs/{job_id}/cancel")
    assert again.status_code == 409, again.text
    assert "cancelled" in again.json()["detail"]
