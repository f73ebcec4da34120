"""Job submissions waiting for the controller's lock are written together, on both databases:
one transaction, a few many-row INSERTs, each caller answered with its own job or error."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.exc import IntegrityError

from backend.audit.actions import AuditAction
from backend.audit.models import AuditEntry
from backend.auth import Principal, TokenKind
from backend.errors import NotFound
from backend.jobs.models import Job, JobEvent, Task
from backend.jobs.schemas import JobRead
from backend.jobs.spec import JobSpec
from backend.scheduling import intake as intake_module
from backend.scheduling.controller import Change, Controller
from backend.scheduling.intake import JobIntake, Submission
from backend.scheduling.transaction import Transaction
from backend.teams.access import Access
from backend.teams.roles import ProjectRole
from tests.conftest import Api
from tests.support.factories import make_spec

ADMIN = Principal(TokenKind.admin)


def access(*, member_of: int | None = None) -> Access:
    """The server's admin token's access, or a user's who is a member of one project."""
    if member_of is None:
        return Access(ADMIN, everywhere=ProjectRole.admin)
    user = Principal(TokenKind.user, user_id=999, user_name="carol")
    return Access(user, roles={member_of: ProjectRole.member})


def spec(name: str, project: str | None = None) -> JobSpec:
    return JobSpec.model_validate(make_spec("parameter_server", name=name, project=project))


Answers = dict[Submission, JobRead | Exception]


def submit(intake: JobIntake, name: str, **how: Any) -> asyncio.Task[JobRead]:
    """A submission by the admin token unless `access` says who, as a task."""
    who: Access = how.pop("access", access())
    return asyncio.create_task(
        intake.submit(spec(name, **how), access=who, principal=who.principal, source="test")
    )


def controller_of(api: Api) -> Controller:
    controller = api.app.state.controller  # type: ignore[attr-defined]
    assert isinstance(controller, Controller)
    return controller


class Held:
    """Holds the controller's lock (a change that waits) until released."""

    def __init__(self, controller: Controller) -> None:
        self.release = asyncio.Event()
        self.holding = asyncio.Event()

        async def wait(_tx: Transaction) -> None:
            self.holding.set()
            await self.release.wait()

        self.task = asyncio.create_task(controller.apply(wait))

    async def __aenter__(self) -> Held:
        await self.holding.wait()
        return self

    async def __aexit__(self, *_: object) -> None:
        self.release.set()
        await self.task


def count_inserts(api: Api) -> Counter[str]:
    inserts: Counter[str] = Counter()

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("INSERT INTO"):
            inserts[statement.split()[2]] += 1

    engine = api.app.state.engine  # type: ignore[attr-defined]
    event.listen(engine.sync_engine, "before_cursor_execute", count)
    return inserts


async def test_a_batch_waits_briefly_for_submissions_still_being_checked(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wait longer than any stall of a busy machine between two steps of this test: what is
    # checked is that the batch waits for the request still arriving, not for how long.
    monkeypatch.setattr(intake_module, "GATHER_SECONDS", 1.0)
    controller = controller_of(api)
    intake = JobIntake(apply=controller.apply)
    inserts = count_inserts(api)
    with intake.arriving():  # another request, still checking its submission
        first = submit(intake, "first")
        await asyncio.sleep(0.01)  # the first is gathered meanwhile
        second = submit(intake, "second")
        await asyncio.sleep(0)  # handed in as its request's checks end, as the route does
    jobs = await asyncio.gather(first, second)
    assert [job.name for job in jobs] == ["first", "second"]
    assert inserts == Counter({"jobs": 1, "tasks": 1, "job_events": 1, "audit_entries": 1})
    # A submission does not wait for a request that never hands one in: it is written while that
    # request is still arriving. (The bound only turns a hang into a failure; the machine is noisy.)
    with intake.arriving():
        await asyncio.wait_for(submit(intake, "alone"), timeout=intake_module.GATHER_SECONDS + 10)
    assert inserts["jobs"] == 2


async def test_submissions_waiting_for_the_lock_are_written_in_one_batch(api: Api) -> None:
    controller = controller_of(api)
    intake = JobIntake(apply=controller.apply)
    inserts = count_inserts(api)
    async with Held(controller):
        submitted = [submit(intake, f"j{n}") for n in range(12)]
        await asyncio.sleep(0.05)
        assert not any(s.done() for s in submitted)  # nothing written while the lock is held
    jobs = await asyncio.gather(*submitted)
    assert [job.name for job in jobs] == [f"j{n}" for n in range(12)]
    assert len({job.id for job in jobs}) == 12
    # One statement per table for all twelve jobs.
    assert inserts == Counter({"jobs": 1, "tasks": 1, "job_events": 1, "audit_entries": 1})
    async with api.session() as session:
        for job in jobs:
            stored = await session.scalars(select(Task.job_id).where(Task.job_id == job.id))
            assert len(list(stored)) == len(job.tasks) == 4
        created = await session.execute(select(JobEvent.job_id, JobEvent.actor))
        assert sorted(created.all()) == sorted((job.id, ADMIN.label) for job in jobs)
        audited = await session.scalars(select(AuditEntry.job_id))
        assert sorted(i or 0 for i in audited) == sorted(job.id for job in jobs)


async def test_a_refused_submission_does_not_fail_the_others_in_its_batch(api: Api) -> None:
    controller = controller_of(api)
    intake = JobIntake(apply=controller.apply)
    carol = access(member_of=123456)  # a member of a project that does not exist
    async with Held(controller):
        ok = submit(intake, "ok")
        refused = submit(intake, "no", project="nowhere", access=carol)
        await asyncio.sleep(0.05)
    assert (await ok).name == "ok"
    with pytest.raises(NotFound, match="no project named nowhere"):
        await refused
    async with api.session() as session:
        assert list(await session.scalars(select(Job.name))) == ["ok"]


async def test_a_caller_gone_before_its_batch_is_taken_leaves_no_job(api: Api) -> None:
    controller = controller_of(api)
    intake = JobIntake(apply=controller.apply)
    async with Held(controller):
        gone = submit(intake, "gone")
        kept = submit(intake, "kept")
        await asyncio.sleep(0.05)
        gone.cancel()
    assert (await kept).name == "kept"
    assert gone.cancelled()
    async with api.session() as session:
        assert list(await session.scalars(select(Job.name))) == ["kept"]


def failing_batches(
    controller: Controller, error: Exception, batches: list[int]
) -> Callable[[Change[Answers]], Awaitable[Answers]]:
    """Controller.apply, but a batch of more than one submission raises `error` once it has
    written its jobs (before the commit), and each batch's size is noted."""

    async def apply(change: Change[Answers]) -> Answers:
        async def counted(tx: Transaction) -> Answers:
            answers = await change(tx)
            batches.append(len(answers))
            if len(answers) > 1:
                raise error
            return answers

        return await controller.apply(counted)

    return apply


async def test_a_batch_the_database_refuses_is_written_again_one_at_a_time(api: Api) -> None:
    controller = controller_of(api)
    batches: list[int] = []
    refused = IntegrityError("INSERT INTO jobs ...", {}, Exception("refused"))
    intake = JobIntake(apply=failing_batches(controller, refused, batches))
    async with Held(controller):
        submitted = [submit(intake, f"j{n}") for n in range(3)]
        await asyncio.sleep(0.05)
    jobs = await asyncio.gather(*submitted)
    assert batches == [3, 1, 1, 1]
    assert [job.name for job in jobs] == ["j0", "j1", "j2"]
    async with api.session() as session:
        assert await session.scalar(select(func.count(Job.id))) == 3  # the failed batch left none


async def test_any_other_failure_is_each_callers_and_nothing_is_written_again(api: Api) -> None:
    controller = controller_of(api)
    batches: list[int] = []
    intake = JobIntake(apply=failing_batches(controller, RuntimeError("broken"), batches))
    async with Held(controller):
        submitted = [submit(intake, f"j{n}") for n in range(3)]
        await asyncio.sleep(0.05)
    answers = await asyncio.gather(*submitted, return_exceptions=True)
    assert batches == [3]  # not written again: the error might have come after a commit
    assert [str(answer) for answer in answers] == ["broken"] * 3
    async with api.session() as session:
        assert await session.scalar(select(func.count(Job.id))) == 0


async def test_a_submissions_answer_is_the_job_as_stored_and_its_rows_are_complete(
    api: Api,
) -> None:
    """The answer is built from the values inserted (nothing is read again): it must be
    what reading the job gives, and the rows must be what the rest of the server reads."""
    board = api.app.state.cluster_board  # type: ignore[attr-defined]
    await api.http.get("/cluster")  # read once: from now on the board is told of changes
    posted = await api.http.post("/jobs", json=make_spec("parameter_server", name="stored"))
    assert posted.status_code == 201, posted.text
    job = posted.json()
    assert job["reason"] == "waiting to be placed"
    read = (await api.http.get(f"/jobs/{job['id']}")).json()
    # A controller pass may have said why it waits meanwhile (no host here has room).
    changing = {"reason", "updated_at"}
    assert {k: v for k, v in read.items() if k not in changing} == {
        k: v for k, v in job.items() if k not in changing
    }
    assert [t["status"] for t in job["tasks"]] == ["pending"] * len(job["tasks"])
    async with api.session() as session:
        stored = await session.get_one(Job, job["id"])
        assert stored.version >= 1 and stored.created_at == datetime.fromisoformat(
            read["created_at"]
        )
        [created] = await session.scalars(select(JobEvent).where(JobEvent.job_id == job["id"]))
        assert (created.kind, created.actor) == ("created", job["submitted_by"])
        [entry] = await session.scalars(select(AuditEntry).where(AuditEntry.job_id == job["id"]))
        assert (entry.action, entry.detail) == (AuditAction.job_submit, {"name": "stored"})
        tasks = await session.scalar(select(func.count(Task.id)).where(Task.job_id == job["id"]))
        assert tasks == len(job["tasks"])
    assert (
        board._job_names.get(job["id"]) == "stored"
        or board._pending.job_names.get(job["id"]) == "stored"
    )
