"""PendingJobs: gang placement of queued jobs, the reason when they don't fit, the per-pass cap."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from agents.protocol import StartTask, TaskKey
from agents.runtime_environment import EngineInfo
from backend.cluster.service import set_draining
from backend.jobs.models import Job, Task
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.evaluator import request_evaluator
from backend.scheduling.lifecycle import transition_job
from backend.scheduling.reconcilers import pending_jobs as pending_jobs_module
from backend.scheduling.reconcilers.pending_jobs import PLACEMENTS_PER_PASS, PendingJobs
from backend.scheduling.restarts import unplace_task
from backend.scheduling.transaction import Transaction
from tests.backend.scheduling.reconcilers.conftest import World


def pending_jobs(world: World, wakes: list[int] | None = None) -> PendingJobs:
    calls = wakes if wakes is not None else []
    return PendingJobs(view=world.view, wake=lambda: calls.append(1))


async def test_places_every_task_and_starts_them(world: World) -> None:
    await world.host("host-a", gpus=2)
    job_id = await world.job("parameter_server")
    outbox = await world.run(pending_jobs(world))
    job = await world.load(job_id)
    assert job.status is JobStatus.scheduled
    assert job.reason == "placed on host-a"
    assert {t.status for t in job.tasks} == {TaskStatus.scheduled}
    assert len({t.port for t in job.tasks}) == 4
    started = [m.key.task for _, m in outbox.messages if isinstance(m, StartTask)]
    assert sorted(started) == ["chief:0", "ps:0", "worker:0", "worker:1"]
    assert all(t.tf_config is not None for t in job.tasks)


async def test_a_job_that_does_not_fit_waits_with_the_reason(world: World) -> None:
    await world.host("host-a", gpus=1)
    job_id = await world.job("mirrored", replicas={"chief": {"count": 1, "gpus": 2}})
    outbox = await world.run(pending_jobs(world))
    job = await world.load(job_id)
    assert job.status is JobStatus.pending
    assert job.reason is not None and "2 GPUs" in job.reason
    assert outbox.messages == []
    # Nothing changed: the next pass does not examine it again (it is still looked at later).
    assert world.view.unplaced is not None


async def test_a_job_ended_meanwhile_is_not_placed(world: World) -> None:
    await world.host("host-a")
    job_id = await world.job("mirrored")
    async with world.sessions() as session:
        job = await session.get_one(Job, job_id)
        await transition_job(session=session, job=job, to=JobStatus.cancelled, reason="by hand")
        await session.commit()
    outbox = await world.run(pending_jobs(world))
    assert outbox.messages == []
    assert (await world.load(job_id)).reason == "by hand"


async def test_a_pass_places_at_most_its_share_and_asks_for_another(world: World) -> None:
    for name in ("host-a", "host-b"):  # 100 ports each: room for every job
        await world.host(name, gpus=0)
    for _ in range(PLACEMENTS_PER_PASS + 1):
        await world.job("mirrored", replicas={"chief": {"count": 1, "gpus": 0}})
    wakes: list[int] = []
    outbox = await world.run(pending_jobs(world, wakes))
    assert len(outbox.messages) == PLACEMENTS_PER_PASS
    assert wakes == [1]
    outbox = await world.run(pending_jobs(world, wakes))
    assert len(outbox.messages) == 1


async def test_waits_for_the_previous_attempt_to_stop(world: World) -> None:
    await world.host("host-a")
    job_id = await world.job("mirrored")
    async with world.sessions() as session:
        task = (await world.load(job_id)).tasks[0]
        row = await session.get_one(Task, task.id)
        row.attempt = 1
        await session.commit()

    world.view.running.report(
        "host-a", frozenset({TaskKey(job_id=job_id, task="chief:0", attempt=0)})
    )
    outbox = await world.run(pending_jobs(world))
    assert outbox.messages == []
    assert (
        await world.load(job_id)
    ).reason == "waiting for the tasks of its previous attempt to stop"


DOCKER = EngineInfo(version="27.3.1")
IMAGE = "tensorflow/tensorflow:2.21.0"


async def test_an_image_job_waits_with_the_reason_until_a_host_has_an_engine(
    world: World,
) -> None:
    await world.host("local-0", gpus=2)
    job_id = await world.job("parameter_server", environment={"image": IMAGE})
    outbox = await world.run(pending_jobs(world))
    job = await world.load(job_id)
    assert job.status is JobStatus.pending
    assert job.reason == f"no host can run image {IMAGE}: local-0 has no container engine"
    assert outbox.messages == []

    await world.host("local-1", gpus=2, engine=DOCKER)
    world.hub.changes += 1  # as its agent's attach does
    outbox = await world.run(pending_jobs(world))
    job = await world.load(job_id)
    assert job.status is JobStatus.scheduled, job.reason
    assert {t.host.name for t in job.tasks if t.host is not None} == {"local-1"}
    starts = [m for _, m in outbox.messages if isinstance(m, StartTask)]
    assert sorted(m.key.task for m in starts) == ["chief:0", "ps:0", "worker:0", "worker:1"]
    assert {m.environment.image for m in starts if m.environment is not None} == {IMAGE}
    assert all(m.environment is not None for m in starts)


async def test_an_image_job_goes_to_the_host_whose_engine_has_the_image(world: World) -> None:
    await world.host("local-0", gpus=4, engine=DOCKER)  # more room, but it would pull
    await world.host("local-1", gpus=2, engine=DOCKER.model_copy(update={"images": [IMAGE]}))
    job = await world.placed("mirrored", environment={"image": IMAGE})
    assert job.reason == "placed on local-1"


async def test_a_job_without_an_image_still_uses_hosts_without_an_engine(world: World) -> None:
    await world.host("local-0", gpus=2)
    job = await world.placed("mirrored", environment={"python": "/opt/tf/bin/python"})
    assert job.reason == "placed on local-0"


async def test_an_evaluator_asked_for_later_runs_in_the_image_on_an_engine_host(
    world: World,
) -> None:
    await world.host("local-0", gpus=8)
    await world.host("local-1", gpus=2, engine=DOCKER)
    job = await world.running("parameter_server", environment={"image": IMAGE})
    assert {t.host.name for t in job.tasks if t.host is not None} == {"local-1"}

    class StartEvaluator:
        async def reconcile(self, tx: Transaction) -> None:
            await request_evaluator(tx, job_id=job.id, action="start")

    outbox = await world.run(StartEvaluator())
    (start,) = [m for _, m in outbox.messages if isinstance(m, StartTask)]
    assert start.key.task == "evaluator:0"
    assert start.environment is not None and start.environment.image == IMAGE
    assert [host for host, _ in outbox.messages] == ["local-1"]


async def test_a_job_submitted_to_a_full_cluster_is_examined_alone(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    await world.host("host-a", gpus=1)
    too_big = {"chief": {"count": 1, "gpus": 2}}
    first = await world.job("mirrored", replicas=too_big)
    examined: list[int] = []
    real_place = pending_jobs_module.PendingJobs._place

    async def counted(self: PendingJobs, tx: Transaction, job: Job, *args: Any) -> bool:
        examined.append(job.id)
        return await real_place(self, tx, job, *args)

    monkeypatch.setattr(pending_jobs_module.PendingJobs, "_place", counted)
    reconciler = pending_jobs(world)
    await world.run(reconciler)
    second = await world.job("mirrored", replicas=too_big)
    await world.run(reconciler)
    await world.run(reconciler)  # nothing new: nothing examined
    assert examined == [first, second]
    # Once the cluster changes (a host joins), every waiting job is examined again.
    await world.host("host-b", gpus=2)
    world.hub.changes += 1  # as the agent's attaching does
    await world.run(reconciler)
    assert examined[2:] == [first, second]
    assert (await world.load(first)).status is JobStatus.scheduled


async def test_a_drained_host_takes_no_new_task(world: World) -> None:
    await world.host("host-a", gpus=2)
    await world.host("host-b", gpus=2)
    async with world.sessions() as session:
        await set_draining(session=session, name="host-a", draining=True)
        await session.commit()
    first = await world.job("mirrored", replicas={"chief": {"count": 1, "gpus": 2}})
    second = await world.job("mirrored", replicas={"chief": {"count": 1, "gpus": 2}})
    await world.run(pending_jobs(world))
    placed = await world.load(first)
    assert placed.reason == "placed on host-b"
    waiting = await world.load(second)
    assert waiting.status is JobStatus.pending  # host-a has room, but is drained
    async with world.sessions() as session:
        await set_draining(session=session, name="host-a", draining=False)
        await session.commit()
    world.view.capacity_changed()
    await world.run(pending_jobs(world))
    assert (await world.load(second)).reason == "placed on host-a"


async def test_the_tasks_moved_off_a_host_join_those_that_stayed(world: World) -> None:
    await world.host("host-a", gpus=4)
    job = await world.running("parameter_server")
    ps = next(t for t in job.tasks if t.name == "ps:0")
    ps_address = ps.tf_config["cluster"]["ps"][0] if ps.tf_config else None
    async with world.sessions() as session:
        tx = Transaction(session=session, executors=world.executors)
        loaded = await session.get_one(Job, job.id)
        await transition_job(session=session, job=loaded, to=JobStatus.pending, reason="moved")
        for task in await session.scalars(select(Task).where(Task.job_id == job.id)):
            if task.name != "ps:0":
                unplace_task(tx=tx, task=task, reason="moved", failure=False)
        await session.commit()
    world.view.running.report("host-a", frozenset({ps.key}))  # the moved ones have stopped
    world.view.capacity_changed()
    await world.run(pending_jobs(world))
    placed = await world.load(job.id)
    assert placed.status is JobStatus.scheduled, placed.reason
    staying = next(t for t in placed.tasks if t.name == "ps:0")
    assert (staying.status, staying.attempt) == (TaskStatus.running, 0)
    for task in placed.tasks:
        assert task.tf_config is not None
        assert task.tf_config["cluster"]["ps"] == [ps_address], task.name
    chief = next(t for t in placed.tasks if t.name == "chief:0")
    assert chief.attempt == 1 and chief.tf_config is not None
    assert len(chief.tf_config["cluster"]["worker"]) == 2
