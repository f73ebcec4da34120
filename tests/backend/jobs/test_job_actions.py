"""`JobRead.actions` says what the routes accept: for every job status, on real jobs through
the API (SQLite and PostgreSQL), and as a pure function."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import selectinload
from sqlalchemy.orm.exc import StaleDataError

from backend.hosts.models import Host
from backend.jobs.actions import JobActions, job_actions, suspend_refusal
from backend.jobs.models import Job, Task
from backend.jobs.spec import JobSpec
from backend.jobs.states import LIVE_TASK_STATUSES, JobStatus, TaskStatus
from backend.scheduling.hub import AgentConnection, AgentHub
from tests.conftest import Api
from tests.support.factories import make_host, make_spec

HOST = "room-for-the-evaluator"
ACTIONS = tuple(JobActions.model_fields)


class SilentAgent:
    """A websocket an agent connection writes to; nothing answers (no task ever starts)."""

    async def send_text(self, _text: str) -> None:
        return None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        return None


async def connected_host(api: Api) -> None:
    """A connected host without GPUs: room for the evaluator (no GPU) but not for the jobs
    here (a GPU each), so that the controller leaves them where the test puts them."""
    async with api.session() as session:
        await make_host(session, HOST, gpus=0)
        await session.commit()
    hub: AgentHub = api.app.state.hub  # type: ignore[attr-defined]
    hub.attach(AgentConnection(HOST, SilentAgent()))  # type: ignore[arg-type]


async def arranged(
    api: Api,
    status: JobStatus,
    *,
    spec: dict[str, Any] | None = None,
    evaluator: TaskStatus | None = None,
) -> int:
    """A job in `status`, its training tasks placed on the host unless it is pending, and
    an evaluator task in the given state (none when None). Arranged directly: placement
    is not under test."""
    response = await api.http.post("/jobs", json=spec or make_spec("mirrored"))
    assert response.status_code == 201, response.text
    job_id: int = response.json()["id"]
    for _ in range(5):  # a controller pass may write the job meanwhile (its reason)
        try:
            async with api.session() as session:
                job = await session.get_one(Job, job_id, options=[selectinload(Job.tasks)])
                host = await session.scalar(select(Host).where(Host.name == HOST))
                assert host is not None
                job.status = status
                # A pending job's tasks wait for placement (the controller would place it).
                placed = job.tasks if status is not JobStatus.pending else []
                for port, task in enumerate(placed, start=42000):
                    task.host_id, task.port, task.status = host.id, port, TaskStatus.running
                if evaluator is not None:
                    live = evaluator in LIVE_TASK_STATUSES  # it has a place, like the others
                    session.add(
                        Task(
                            job_id=job_id,
                            role="evaluator",
                            index=0,
                            status=evaluator,
                            host_id=host.id if live else None,
                            port=42100 if live else None,
                            gpu_indices=[],
                        )
                    )
                await session.commit()
            return job_id
        except StaleDataError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"job {job_id} could not be arranged")


async def allowed(api: Api, job_id: int) -> dict[str, bool]:
    response = await api.http.get(f"/jobs/{job_id}")
    assert response.status_code == 200, response.text
    actions: dict[str, bool] = response.json()["actions"]
    assert set(actions) == set(ACTIONS)
    return actions


async def request(api: Api, job_id: int, action: str) -> tuple[int, str]:
    paths = {
        "cancel": (f"/jobs/{job_id}/cancel", None),
        "restart": (f"/jobs/{job_id}/restart", None),
        "task_restart": (f"/jobs/{job_id}/tasks/chief:0/restart", None),
        "checkpoint": (f"/jobs/{job_id}/checkpoint", None),
        "evaluator_start": (f"/jobs/{job_id}/evaluator", {"action": "start"}),
        "evaluator_stop": (f"/jobs/{job_id}/evaluator", {"action": "stop"}),
    }
    path, body = paths[action]
    response = await api.http.post(
        path, json=body, params={"wait_seconds": 1} if action == "checkpoint" else None
    )
    return response.status_code, str(response.json().get("detail"))


async def agrees(api: Api, job_id: int, action: str) -> bool:
    """Whether what the job read says of `action` is what its route answers."""
    said = (await allowed(api, job_id))[action]
    code, detail = await request(api, job_id, action)
    assert code in (200, 409), (action, code, detail)
    if action == "checkpoint" and said:
        # Past the job's own state, checkpoint now needs the chief's runtime connected.
        assert code == 409 and "not connected" in detail, detail
        return True
    assert (code == 200) == said, (action, said, code, detail)
    return True


@pytest.mark.parametrize("status", list(JobStatus))
async def test_actions_agree_with_what_the_routes_answer(api: Api, status: JobStatus) -> None:
    await connected_host(api)
    for action in ("cancel", "restart", "task_restart", "checkpoint", "evaluator_start"):
        assert await agrees(api, await arranged(api, status), action)
    # Stopping needs an evaluator that runs (or waits to), whatever the job does. (Not one
    # that waits in a finished job: the next controller pass stops it.)
    evaluators = [TaskStatus.running, TaskStatus.stopped]
    if not status.is_terminal:
        evaluators.append(TaskStatus.pending)
    for evaluator in evaluators:
        job_id = await arranged(api, status, evaluator=evaluator)
        assert await agrees(api, job_id, "evaluator_stop")
        assert await agrees(
            api, await arranged(api, status, evaluator=evaluator), "evaluator_start"
        )


async def test_actions_follow_the_spec(api: Api) -> None:
    await connected_host(api)
    no_checkpoints = make_spec("mirrored", checkpoint={"every_epochs": None})
    job_id = await arranged(api, JobStatus.running, spec=no_checkpoints)
    assert (await allowed(api, job_id))["evaluator_start"] is False
    assert await agrees(api, job_id, "evaluator_start")

    together = make_spec("multi_worker_mirrored", replicas={"worker": {"count": 2, "gpus": 1}})
    job_id = await arranged(api, JobStatus.running, spec=together)
    assert (await allowed(api, job_id))["checkpoint"] is False
    assert await agrees(api, job_id, "checkpoint")


async def test_a_job_read_after_an_action_says_what_is_left(api: Api) -> None:
    await connected_host(api)
    job_id = await arranged(api, JobStatus.running)
    started = await api.http.post(f"/jobs/{job_id}/evaluator", json={"action": "start"})
    assert started.status_code == 200, started.text
    actions = started.json()["actions"]
    assert (actions["evaluator_start"], actions["evaluator_stop"]) == (False, True)
    cancelled = (await api.http.post(f"/jobs/{job_id}/cancel")).json()["actions"]
    # The evaluator may still be stopping (its exit not yet reported): leave that aside.
    assert not any(on for name, on in cancelled.items() if name != "evaluator_stop")


# --- the rules alone ----------------------------------------------------------------------


class T:
    def __init__(self, role: str, status: TaskStatus) -> None:
        self.role, self.status = role, status


SPEC = JobSpec.model_validate(make_spec("parameter_server"))
TASKS = [
    T("chief", TaskStatus.running),
    T("worker", TaskStatus.running),
    T("ps", TaskStatus.running),
]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (JobStatus.pending, {"cancel", "evaluator_start", "suspend"}),
        (
            JobStatus.scheduled,
            {"cancel", "restart", "task_restart", "evaluator_start", "suspend"},
        ),
        (
            JobStatus.running,
            {"cancel", "restart", "task_restart", "checkpoint", "evaluator_start", "suspend"},
        ),
        (
            JobStatus.restarting,
            {"cancel", "restart", "task_restart", "evaluator_start", "suspend"},
        ),
        (JobStatus.suspended, {"cancel", "evaluator_start", "resume"}),
        (JobStatus.failed, {"restart"}),
        (JobStatus.succeeded, set()),
        (JobStatus.cancelled, set()),
    ],
)
def test_the_rules_by_status(status: JobStatus, expected: set[str]) -> None:
    actions = job_actions(status, SPEC, TASKS).model_dump()
    assert {name for name, on in actions.items() if on} == expected


def test_a_slurm_job_and_a_client_s_job_cannot_be_suspended() -> None:
    slurm = JobSpec.model_validate(make_spec("parameter_server", slurm={"partition": "gpu"}))
    assert suspend_refusal(JobStatus.running, slurm) == (
        "it runs as a Slurm job: Slurm gives its allocation back (scontrol requeue)"
    )
    client = JobSpec.model_validate(
        make_spec(
            "parameter_server",
            coordinator="client",
            replicas={"worker": {"count": 1}, "ps": {"count": 1}},
        )
    )
    assert not job_actions(JobStatus.running, client, TASKS).suspend


def test_the_evaluator_rules() -> None:
    for state in (TaskStatus.pending, TaskStatus.scheduled, TaskStatus.running):
        actions = job_actions(JobStatus.running, SPEC, [*TASKS, T("evaluator", state)])
        assert (actions.evaluator_start, actions.evaluator_stop) == (False, True), state
    for state in (TaskStatus.stopped, TaskStatus.failed, TaskStatus.succeeded, TaskStatus.lost):
        actions = job_actions(JobStatus.running, SPEC, [*TASKS, T("evaluator", state)])
        assert (actions.evaluator_start, actions.evaluator_stop) == (True, False), state
    silent = JobSpec.model_validate(
        make_spec("parameter_server", checkpoint={"every_epochs": None})
    )
    assert not job_actions(JobStatus.running, silent, TASKS).evaluator_start
