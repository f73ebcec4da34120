"""Stragglers: a parameter_server worker under the median / 1.5 over a full window is reported
with its evidence; with `stragglers: restart` it moves to another host and the chief restarts
with the new cluster (a restart, not a failure), once per cooldown; without room it is only
reported."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select

from agents.protocol import MetricPoint, StopTask
from backend.db import utcnow
from backend.jobs.models import Job, JobEvent
from backend.jobs.states import JobStatus, TaskStatus
from backend.scheduling.reconcilers.stragglers import JUDGE_SECONDS, Stragglers
from backend.streams.throughput import ThroughputBoard, closures_metric
from tests.backend.scheduling.reconcilers.conftest import World

WINDOW = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Feed:
    """The chief's counters, reported every 5 s of its wall time."""

    def __init__(self, board: ThroughputBoard, job_id: int, chief_attempt: int = 0) -> None:
        self.board, self.job_id, self.attempt = board, job_id, chief_attempt
        self.at = 10_000.0
        self.totals = [0.0, 0.0, 0.0]

    def run(self, seconds: float, rates: list[float]) -> None:
        for _ in range(int(seconds / 5)):
            self.at += 5
            self.totals = [t + 5 * r for t, r in zip(self.totals, rates, strict=True)]
            self.board.note(
                self.job_id,
                "chief:0",
                self.attempt,
                [
                    MetricPoint(seq=0, name=closures_metric(i), step=0, value=v, wall_time=self.at)
                    for i, v in enumerate(self.totals)
                ],
            )


async def ps_job(world: World, **spec: Any) -> tuple[Job, Stragglers, Feed, Clock]:
    await world.host("host-a", gpus=0)
    await world.host("host-b", gpus=0)
    replicas = {"chief": {"count": 1}, "worker": {"count": 3}, "ps": {"count": 1}}
    job = await world.running("parameter_server", replicas=replicas, **spec)
    for task in job.tasks:  # every attempt has run longer than a window
        await world.set_task(task.id, started_at=utcnow() - timedelta(seconds=2 * WINDOW))
    world.hub.sent.clear()  # the starts of its placement
    clock = Clock()
    board = ThroughputBoard(WINDOW, clock=clock)
    cpu = {"worker:0": 97.0, "worker:1": 95.0, "worker:2": 31.0}
    stragglers = Stragglers(
        board=board,
        settings=world.settings.model_copy(update={"straggler_window_seconds": WINDOW}),
        cpu=lambda job_id, task, attempt: cpu.get(task),
        clock=clock,
    )
    return job, stragglers, Feed(board, job.id), clock


async def health_events(world: World, job_id: int) -> list[JobEvent]:
    async with world.sessions() as session:
        return list(
            await session.scalars(
                select(JobEvent)
                .where(JobEvent.job_id == job_id, JobEvent.kind == "health")
                .order_by(JobEvent.id)
            )
        )


async def test_a_slow_worker_is_reported_once_with_its_evidence_until_it_is_back(
    world: World,
) -> None:
    job, stragglers, feed, clock = await ps_job(world)
    feed.run(20, [6.0, 6.2, 2.0])
    await world.run(stragglers)
    assert await health_events(world, job.id) == []  # not a full window yet

    feed.run(15, [6.0, 6.2, 2.0])
    clock.now += JUDGE_SECONDS
    await world.run(stragglers)
    [event] = await health_events(world, job.id)
    assert event.task == "worker:2"
    assert event.message == "worker:2 is slow: 2 closures/s vs median 6 over 30s"
    assert event.data["finding"] == "straggler" and event.data["action"] == "reported"
    assert event.data["rates"] == {"worker:0": 6.0, "worker:1": 6.2, "worker:2": 2.0}
    assert (event.data["median"], event.data["window_seconds"]) == (6.0, WINDOW)
    assert event.data["cpu_percent"] == {"worker:0": 97.0, "worker:1": 95.0, "worker:2": 31.0}
    assert stragglers.flagged() == [(job.id, "worker:2")]
    loaded = await world.load(job.id)
    assert loaded.status is JobStatus.running and loaded.restart_count == 0
    assert world.hub.sent == []  # reported only: the spec says report

    feed.run(5, [6.0, 6.2, 2.0])
    clock.now += JUDGE_SECONDS
    await world.run(stragglers)
    assert len(await health_events(world, job.id)) == 1  # still slow: no second event

    feed.run(30, [6.0, 6.2, 6.1])
    clock.now += JUDGE_SECONDS
    await world.run(stragglers)
    cleared = (await health_events(world, job.id))[-1]
    assert cleared.data["finding"] == "straggler_cleared"
    assert (cleared.message or "").startswith("worker:2 is no longer slow: 6.1 closures/s")
    assert stragglers.flagged() == []


async def test_a_worker_that_just_restarted_is_not_judged(world: World) -> None:
    job, stragglers, feed, _clock = await ps_job(world)
    worker = next(t for t in job.tasks if t.name == "worker:2")
    await world.set_task(worker.id, started_at=utcnow() - timedelta(seconds=5))
    feed.run(35, [6.0, 6.2, 0.5])
    await world.run(stragglers)
    assert await health_events(world, job.id) == []


async def test_with_restart_the_straggler_moves_and_the_chief_restarts(world: World) -> None:
    job, stragglers, feed, _clock = await ps_job(world, stragglers="restart")
    before = {t.name: t for t in job.tasks}
    slow = before["worker:2"]
    assert slow.host is not None
    from_host = slow.host.name
    feed.run(35, [6.0, 6.2, 2.0])
    await world.run(stragglers)

    moved = await world.load(job.id)
    tasks = {t.name: t for t in moved.tasks}
    worker, chief = tasks["worker:2"], tasks["chief:0"]
    assert worker.host is not None and worker.host.name != from_host
    assert chief.host is not None
    assert (worker.attempt, worker.status, worker.failure_count) == (1, TaskStatus.scheduled, 0)
    assert worker.restart_after is not None  # started once its old attempt is gone
    assert (chief.attempt, chief.status) == (1, TaskStatus.scheduled)
    assert (tasks["worker:0"].attempt, tasks["ps:0"].attempt) == (0, 0)  # they keep running
    assert moved.status is JobStatus.restarting
    assert (moved.restart_count, moved.failure_count) == (1, 0)  # a restart, not a failure
    address = f"{worker.host.address}:{worker.port}"
    for task in moved.tasks:
        assert task.tf_config is not None
        assert task.tf_config["cluster"]["worker"][2] == address
    stopped = {(h, m.key.task) for h, m in world.hub.sent if isinstance(m, StopTask)}
    assert stopped == {(from_host, "worker:2"), (chief.host.name, "chief:0")}
    [event] = await health_events(world, job.id)
    assert event.message == (
        f"worker:2 moved from {from_host} to {worker.host.name}: 2 closures/s vs median 6 over 30s"
    )
    assert (event.data["action"], event.data["from"], event.data["to"]) == (
        "moved",
        from_host,
        worker.host.name,
    )
    assert stragglers.flagged() == [] and stragglers.board.job_ids() == set()


async def test_within_the_cooldown_a_straggler_is_only_reported(world: World) -> None:
    job, stragglers, feed, clock = await ps_job(world, stragglers="restart")
    stragglers.moved_at[job.id] = clock.now - 60
    feed.run(35, [6.0, 6.2, 2.0])
    await world.run(stragglers)
    [event] = await health_events(world, job.id)
    assert event.data["action"] == "reported"
    assert (event.message or "").endswith(
        "not moved: a worker of this job moved 60s ago (cooldown 600s)"
    )
    assert (await world.load(job.id)).status is JobStatus.running


async def test_without_another_host_with_room_it_is_only_reported(world: World) -> None:
    await world.host("solo", gpus=0)
    replicas = {"chief": {"count": 1}, "worker": {"count": 2}, "ps": {"count": 1}}
    job = await world.running("parameter_server", replicas=replicas, stragglers="restart")
    for task in job.tasks:
        await world.set_task(task.id, started_at=utcnow() - timedelta(seconds=2 * WINDOW))
    clock = Clock()
    board = ThroughputBoard(WINDOW, clock=clock)
    stragglers = Stragglers(board=board, settings=world.settings, clock=clock)
    feed = Feed(board, job.id)
    feed.totals = [0.0, 0.0]
    feed.run(35, [6.0, 1.0])
    await world.run(stragglers)
    [event] = await health_events(world, job.id)
    assert event.message == (
        "worker:1 is slow: 1 closures/s vs median 3.5 over 30s; "
        "not moved: no other host takes its tasks now"
    )
    assert (await world.load(job.id)).status is JobStatus.running
