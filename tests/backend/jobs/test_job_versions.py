"""Optimistic concurrency on jobs: a write based on a stale read fails, and the controller
applies the change again on fresh state. On SQLite and on PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import selectinload
from sqlalchemy.orm.exc import StaleDataError

from agents.protocol import Hello, TaskExit, TaskKey, Welcome
from backend.hosts.models import Host
from backend.jobs.models import Job, Task
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling import agent_reports, task_events
from backend.scheduling.agent_reports import AgentReports
from backend.scheduling.controller import Controller
from backend.scheduling.hub import AgentConnection
from backend.scheduling.lifecycle import transition_job
from backend.scheduling.transaction import Transaction
from tests.conftest import Api
from tests.support.factories import make_host, make_spec

IDENTITY = "identity-of-host-a-agent"


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


class RecordingAgent:
    """A websocket an agent connection writes to: it keeps what it was sent."""

    def __init__(self) -> None:
        self.frames: list[dict[str, object]] = []

    async def send_text(self, text: str) -> None:
        self.frames.append(json.loads(text))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        return None


async def running_on(api: Api, host_name: str) -> int:
    """A job whose tasks run on that host (arranged directly: placement is not under test)."""
    job_id = await submitted(api)
    for _ in range(5):  # a controller pass may write the job meanwhile (its reason)
        async with api.session() as session:
            host = await session.scalar(select(Host).where(Host.name == host_name))
            assert host is not None
            job = await session.get_one(Job, job_id, options=[selectinload(Job.tasks)])
            job.status = JobStatus.running
            for port, task in enumerate(job.tasks, start=42000):
                task.host_id, task.port, task.status = host.id, port, TaskStatus.running
            try:
                await session.commit()
            except StaleDataError:
                continue
        return job_id
    raise AssertionError(f"job {job_id} could not be arranged")


async def test_a_change_applied_again_sends_its_commands(quiet_api: Api) -> None:
    """Commands decided by a try that rolled back were never sent: the try that commits
    sends them, rather than taking them for sent moments ago."""
    api = quiet_api
    async with api.session() as session:
        await make_host(session, "host-a", gpus=0)  # no room: the jobs stay where put
        await session.commit()
    agent = RecordingAgent()
    connection = AgentConnection("host-a", agent)  # type: ignore[arg-type]
    api.app.state.hub.attach(connection)  # type: ignore[attr-defined]
    cancelled, other = await running_on(api, "host-a"), await submitted(api)
    controller: Controller = api.app.state.controller  # type: ignore[attr-defined]
    tries = 0

    async def cancel_one_and_touch_the_other(tx: Transaction) -> None:
        nonlocal tries
        tries += 1
        touched = await tx.session.get_one(Job, other)
        if tries == 1:
            await cancel_elsewhere(api, other)  # lands between this read and this write
        await task_events.request_cancel(tx, job_id=cancelled)  # decides its stops
        touched.reason = "written from what was read"

    await controller.apply(cancel_one_and_touch_the_other)
    assert tries == 2
    await connection.drain()  # everything queued for the agent has been written
    async with api.session() as session:
        keys = [t.key for t in await session.scalars(select(Task).where(Task.job_id == cancelled))]
    stops = [TaskKey.model_validate(f["key"]) for f in agent.frames if f["type"] == "stop_task"]
    assert sorted(stops, key=str) == sorted(keys, key=str)


async def reported_over_a_concurrent_change(
    api: Api,
    monkeypatch: pytest.MonkeyPatch,
    report: Callable[[TaskExit], Awaitable[object]],
    first_write: tuple[object, str],
) -> tuple[int, int]:
    """A running job's chief exits, and `report` reports it. The first time, another writer
    changes the job between the controller's read of it and its first write (`first_write`:
    the module and name of the function that writes first, which is wrapped). Returns the
    job and how many times that write was tried."""
    async with api.session() as session:
        await make_host(session, "host-a", gpus=0, identity=IDENTITY)
        await session.commit()
    job_id = await running_on(api, "host-a")
    module, name = first_write
    write = getattr(module, name)
    tries = 0
    read: list[Job] = []  # held: the session keeps only the objects that are referenced

    async def over_a_concurrent_change(**arguments: Any) -> object:
        nonlocal tries
        tries += 1
        session = arguments["session"] if "session" in arguments else arguments["tx"].session
        read.append(await session.get_one(Job, job_id))  # read here ...
        if tries == 1:
            await cancel_elsewhere(api, job_id)  # ... changed elsewhere before this commit
        return await write(**arguments)

    monkeypatch.setattr(module, name, over_a_concurrent_change)
    await report(TaskExit(key=TaskKey(job_id=job_id, task="chief:0", attempt=0), exit_code=0))
    return job_id, tries


async def test_an_exit_is_applied_again_when_its_job_changed_meanwhile(
    quiet_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports: AgentReports = quiet_api.app.state.agent_reports  # type: ignore[attr-defined]

    async def report(exit: TaskExit) -> None:
        await reports.on_task_exited("host-a", exit)

    job_id, tries = await reported_over_a_concurrent_change(
        quiet_api, monkeypatch, report, (task_events, "apply_exit")
    )
    # Applied again on fresh state, rather than raised to the agent's channel: the exit is
    # recorded, in a job the other writer had cancelled meanwhile.
    assert tries == 2
    async with quiet_api.session() as session:
        job = await session.get_one(Job, job_id, options=[selectinload(Job.tasks)])
        assert (job.status, job.reason) == (JobStatus.cancelled, "elsewhere")
        assert [(t.status, t.exit_code) for t in job.tasks] == [(TaskStatus.stopped, 0)]


async def test_a_hello_is_applied_again_when_a_job_changed_meanwhile(
    quiet_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports: AgentReports = quiet_api.app.state.agent_reports  # type: ignore[attr-defined]
    answers: list[list[object]] = []

    async def report(exit: TaskExit) -> None:
        hello = Hello(
            name="host-a",
            address="127.0.0.1",
            port_range=(42000, 42099),
            devices=[],
            version="test",
            identity=IDENTITY,
            finished=[exit],  # it ended while the agent was away
        )
        answers.append(list(await reports.on_hello(hello)))

    job_id, tries = await reported_over_a_concurrent_change(
        quiet_api, monkeypatch, report, (agent_reports, "register_host")
    )
    assert tries == 2
    (answer,) = answers
    assert isinstance(answer[0], Welcome)
    async with quiet_api.session() as session:
        job = await session.get_one(Job, job_id, options=[selectinload(Job.tasks)])
        assert job.status is JobStatus.cancelled
        assert [(t.status, t.exit_code) for t in job.tasks] == [(TaskStatus.stopped, 0)]
