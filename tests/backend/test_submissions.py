"""Submissions that arrive together share a controller transaction, and keep their own
outcomes. On SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from sqlalchemy import select

from backend.audit.models import AuditEntry
from backend.auth import Principal, TokenKind
from backend.errors import Forbidden
from backend.jobs.models import Job, JobEvent
from backend.jobs.spec import JobSpec
from backend.jobs.submissions import Submissions
from backend.scheduling.controller import Controller
from backend.scheduling.transaction import Transaction
from backend.teams.access import Access
from backend.teams.models import Project
from backend.teams.roles import ProjectRole
from tests.conftest import Api
from tests.support.factories import make_spec

ADMIN = Access(Principal(TokenKind.admin), ProjectRole.admin)


def counted(controller: Controller, transactions: list[int]) -> Submissions:
    """Submissions on the app's controller, counting the transactions they take and how many
    jobs each stores."""

    async def apply(change: Callable[[Transaction], Awaitable[list[Job]]]) -> list[Job]:
        jobs = await controller.apply(change, frees_or_takes_capacity=False)
        transactions.append(len(jobs))
        return jobs

    return Submissions(apply)


def spec(name: str, project: str | None = None) -> JobSpec:
    return JobSpec.model_validate(make_spec("mirrored", name=name, project=project))


async def test_a_burst_is_stored_by_few_transactions_each_job_whole(api: Api) -> None:
    transactions: list[int] = []
    submissions = counted(api.app.state.controller, transactions)  # type: ignore[attr-defined]
    stored = await asyncio.gather(
        *(
            submissions.submit(
                spec=spec(f"burst-{n}"), principal=ADMIN.principal, access=ADMIN, source="10.0.0.9"
            )
            for n in range(30)
        )
    )
    ids = [job.id for job in stored]
    assert len(set(ids)) == 30
    # Each comes back as stored, its tasks with it (what POST /jobs answers).
    assert all(job.tasks and job.created_at is not None for job in stored)
    # All were waiting when the first transaction began (not one transaction each).
    assert sum(transactions) == 30 and len(transactions) <= 2, transactions
    async with api.session() as session:
        jobs = {job.id: job for job in await session.scalars(select(Job).where(Job.id.in_(ids)))}
        assert [jobs[i].name for i in ids] == [f"burst-{n}" for n in range(30)]
        events = list(await session.scalars(select(JobEvent).where(JobEvent.job_id.in_(ids))))
        assert sorted(e.job_id for e in events) == sorted(ids)
        assert {e.actor for e in events} == {ADMIN.principal.label}
        entries = list(await session.scalars(select(AuditEntry).where(AuditEntry.job_id.in_(ids))))
        by_job = {e.job_id: e for e in entries}
        assert len(entries) == 30 and set(by_job) == set(ids)
        assert {(e.action, e.source) for e in entries} == {("job.submit", "10.0.0.9")}
        for job_id, job in jobs.items():
            assert (by_job[job_id].detail["name"], by_job[job_id].project_id) == (
                job.name,
                job.project_id,
            )


async def test_one_refused_submission_fails_alone(api: Api) -> None:
    async with api.session() as session:
        vision = Project(name="vision")
        session.add(vision)
        await session.commit()
        vision_id = vision.id
    # A viewer of vision by the time the transaction reads its project (demoted since the
    # route's check): refused, while the others' jobs are stored.
    viewer = Access(
        Principal(TokenKind.user, user_id=999, user_name="carol"),
        roles={vision_id: ProjectRole.viewer},
    )
    transactions: list[int] = []
    submissions = counted(api.app.state.controller, transactions)  # type: ignore[attr-defined]

    def admin_job(n: int) -> Awaitable[Job]:
        return submissions.submit(
            spec=spec(f"ok-{n}", "vision"), principal=ADMIN.principal, access=ADMIN, source=None
        )

    outcomes = await asyncio.gather(
        admin_job(0),
        admin_job(1),
        submissions.submit(
            spec=spec("refused", "vision"), principal=viewer.principal, access=viewer, source=None
        ),
        admin_job(2),
        return_exceptions=True,
    )
    assert isinstance(outcomes[2], Forbidden)
    assert "carol is a viewer of project vision" in str(outcomes[2])
    stored = [outcome for n, outcome in enumerate(outcomes) if n != 2]
    assert all(isinstance(job, Job) for job in stored)
    async with api.session() as session:
        names = set(await session.scalars(select(Job.name).where(Job.project_id == vision_id)))
        assert names == {"ok-0", "ok-1", "ok-2"}
        refused = await session.scalar(select(AuditEntry).where(AuditEntry.actor == "carol"))
        assert refused is None  # a refused change leaves no entry


async def test_jobs_submitted_at_once_over_http_all_arrive(api: Api) -> None:
    responses = await asyncio.gather(
        *(api.http.post("/jobs", json=make_spec("mirrored", name=f"http-{n}")) for n in range(12))
    )
    assert [r.status_code for r in responses] == [201] * 12, [r.text for r in responses]
    bodies = [r.json() for r in responses]
    assert [b["name"] for b in bodies] == [f"http-{n}" for n in range(12)]
    assert len({b["id"] for b in bodies}) == 12
    assert {b["status"] for b in bodies} == {"pending"}  # no agent: none can be placed
    # Answered from the stored job, not read again: the same as reading it back (but for
    # why it waits, which a controller pass may have written since).
    changing = {"reason", "updated_at"}
    for body in bodies:
        read = (await api.http.get(f"/jobs/{body['id']}")).json()
        assert {k: v for k, v in read.items() if k not in changing} == {
            k: v for k, v in body.items() if k not in changing
        }


async def test_a_batch_that_fails_is_stored_again_one_by_one(api: Api) -> None:
    controller: Controller = api.app.state.controller  # type: ignore[attr-defined]
    batches: list[int] = []

    async def apply(change: Callable[[Transaction], Awaitable[list[Job]]]) -> list[Job]:
        async def failing_together(tx: Transaction) -> list[Job]:
            jobs = await change(tx)
            batches.append(len(jobs))
            if len(jobs) > 1:  # inside the transaction: it rolls back, storing nothing
                raise RuntimeError("the database went away")
            return jobs

        return await controller.apply(failing_together, frees_or_takes_capacity=False)

    submissions = Submissions(apply)
    again = await asyncio.gather(
        *(
            submissions.submit(
                spec=spec(f"again-{n}"), principal=ADMIN.principal, access=ADMIN, source=None
            )
            for n in range(3)
        )
    )
    assert batches == [3, 1, 1, 1]
    ids = [job.id for job in again]
    async with api.session() as session:
        names = list(await session.scalars(select(Job.name).where(Job.id.in_(ids))))
        assert sorted(names) == ["again-0", "again-1", "again-2"]
        stored = await session.scalars(select(Job.id).where(Job.name.startswith("again-")))
        assert sorted(stored) == sorted(ids)  # each exactly once


async def test_a_lone_submission_that_fails_gets_its_error(api: Api) -> None:
    async def apply(change: Callable[[Transaction], Awaitable[list[Job]]]) -> list[Job]:
        raise RuntimeError("the database went away")

    submissions = Submissions(apply)
    with pytest.raises(RuntimeError, match="went away"):
        await submissions.submit(
            spec=spec("lone"), principal=ADMIN.principal, access=ADMIN, source=None
        )
