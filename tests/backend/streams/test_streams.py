"""Metrics in through the runtime channel, out through the job stream and the metrics API."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert, select
from starlette.testclient import WebSocketTestSession
from starlette.websockets import WebSocketDisconnect

from agents.protocol import (
    Ack,
    MetricBatch,
    MetricPoint,
    TaskHello,
    TaskWelcome,
)
from backend.config import async_database_url
from backend.db import create_engine, session_factory
from backend.streams.broker import Broker
from backend.streams.ingest import POSTGRES_WRITERS, AttemptKey, Ingestor
from backend.streams.models import MetricPoint as StoredPoint
from tests.conftest import ADMIN_TOKEN, Api
from tests.support.factories import make_spec
from tests.support.runtime_channel import reply, runtime, task_token

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def submit(client: TestClient) -> int:
    job_id: int = client.post("/jobs", json=make_spec(), headers=ADMIN).json()["id"]
    return job_id


def points(seqs: range, name: str = "loss") -> MetricBatch:
    return MetricBatch(
        points=[
            MetricPoint(seq=s, name=name, step=s * 10, value=1.0 / (s + 1), wall_time=1e9 + s)
            for s in seqs
        ]
    )


def test_batches_are_acked_and_resends_are_not_stored_twice(client: TestClient) -> None:
    job_id = submit(client)
    with runtime(client, job_id) as ws:
        assert reply(ws) == TaskWelcome(next_seq=0)
        ws.send_text(points(range(0, 10)).model_dump_json())
        assert reply(ws) == Ack(seq=9)
        ws.send_text(points(range(5, 15)).model_dump_json())  # a resend overlapping the last
        assert reply(ws) == Ack(seq=14)
    with runtime(client, job_id) as ws:  # after a reconnect the server says where to go on
        assert reply(ws) == TaskWelcome(next_seq=15)

    metrics = client.get(f"/jobs/{job_id}/metrics", headers=ADMIN).json()
    (series,) = metrics["series"]
    assert (series["task"], series["name"], series["total_points"]) == ("chief:0", "loss", 15)
    assert series["steps"] == [s * 10 for s in range(15)]


def test_nan_is_kept_as_null(client: TestClient) -> None:
    job_id = submit(client)
    with runtime(client, job_id) as ws:
        reply(ws)
        batch = MetricBatch(
            points=[
                MetricPoint(seq=0, name="loss", step=1, value=math.nan, wall_time=1.0),
                MetricPoint(seq=1, name="loss", step=2, value=0.5, wall_time=2.0),
            ]
        )
        ws.send_text(batch.model_dump_json())
        assert reply(ws) == Ack(seq=1)
    (series,) = client.get(f"/jobs/{job_id}/metrics", headers=ADMIN).json()["series"]
    assert series["values"] == [None, 0.5]


def test_downsampling_keeps_the_spike(client: TestClient) -> None:
    job_id = submit(client)
    values = [1.0] * 1000
    values[777] = 50.0
    batch = MetricBatch(
        points=[
            MetricPoint(seq=i, name="loss", step=i, value=v, wall_time=1.0)
            for i, v in enumerate(values)
        ]
    )
    with runtime(client, job_id) as ws:
        reply(ws)
        ws.send_text(batch.model_dump_json())
        reply(ws)
    (series,) = client.get(
        f"/jobs/{job_id}/metrics", params={"max_points": 100}, headers=ADMIN
    ).json()["series"]
    assert series["total_points"] == 1000
    assert len(series["steps"]) <= 100
    assert 50.0 in series["values"] and 777 in series["steps"]
    assert series["steps"] == sorted(series["steps"])


@pytest.mark.parametrize(
    ("headers", "hello", "reason"),
    [
        (ADMIN, None, "a task token (STRATA_TASK_TOKEN) is required"),
        (None, '{"type": "metrics", "points": []}', "invalid task_hello"),
        (
            None,
            TaskHello(task="worker:7", attempt=0).model_dump_json(),
            "has no worker:7 attempt 0",
        ),
        (None, TaskHello(task="chief:0", attempt=3).model_dump_json(), "has no chief:0 attempt 3"),
    ],
)
def test_runtime_channel_refusals(
    client: TestClient, headers: dict[str, str] | None, hello: str | None, reason: str
) -> None:
    job_id = submit(client)
    with client.websocket_connect(
        "/tasks/connect", headers=headers or task_token(client, job_id)
    ) as ws:
        if hello is not None:
            ws.send_text(hello)
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    assert closed.value.code == 1008
    assert reason in closed.value.reason


def test_task_token_of_another_job_cannot_report_here(client: TestClient) -> None:
    mine, other = submit(client), submit(client)
    with client.websocket_connect("/tasks/connect", headers=task_token(client, other)) as ws:
        ws.send_text(TaskHello(task="chief:0", attempt=0).model_dump_json())
        assert reply(ws) == TaskWelcome(next_seq=0)
        ws.send_text(points(range(3)).model_dump_json())
        reply(ws)
    assert client.get(f"/jobs/{mine}/metrics", headers=ADMIN).json()["series"] == []
    assert len(client.get(f"/jobs/{other}/metrics", headers=ADMIN).json()["series"]) == 1


@contextmanager
def subscribe(
    client: TestClient, job_id: int, cursor: str | None = None
) -> Iterator[WebSocketTestSession]:
    with client.websocket_connect(f"/jobs/{job_id}/stream?token={ADMIN_TOKEN}") as ws:
        ws.send_text(json.dumps({"type": "subscribe", "cursor": cursor}))
        yield ws


def frames_until(ws: WebSocketTestSession, kind: str) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = json.loads(ws.receive_text())
        frames.append(frame)
        if frame["type"] == kind:
            return frames


def test_job_stream_history_live_and_resume(client: TestClient) -> None:
    job_id = submit(client)
    logs = client.app.state.logs  # type: ignore[attr-defined]
    with runtime(client, job_id) as task:
        reply(task)
        task.send_text(points(range(0, 5)).model_dump_json())
        reply(task)
        logs.append(job_id, "chief:0", 0, 0, ["line 0", "line 1"])

        with subscribe(client, job_id) as stream:
            history = frames_until(stream, "history_end")
            assert history[0]["type"] == "event" and history[0]["event"]["kind"] == "created"
            metrics = next(f for f in history if f["type"] == "metrics")
            assert metrics["task"] == "chief:0"
            assert metrics["series"]["loss"][0] == [0, 10, 20, 30, 40]
            log = next(f for f in history if f["type"] == "log")
            assert (log["first_line"], log["lines"]) == (0, ["line 0", "line 1"])

            # Live: new points, log lines and events arrive as they happen.
            task.send_text(points(range(5, 8)).model_dump_json())
            reply(task)
            live = json.loads(stream.receive_text())
            assert live["type"] == "metrics" and live["series"]["loss"][0] == [50, 60, 70]
            logs.append(job_id, "chief:0", 0, 2, ["line 2"])
            live_log = json.loads(stream.receive_text())
            assert (live_log["type"], live_log["first_line"]) == ("log", 2)
            assert live_log["lines"] == ["line 2"]
            client.post(f"/jobs/{job_id}/cancel", headers=ADMIN)
            event = json.loads(stream.receive_text())
            assert event["type"] == "event" and event["event"]["to_status"] == "cancelled"
            cursor = event["cursor"]

        # Meanwhile more happens; resuming from the cursor brings exactly the rest.
        task.send_text(points(range(8, 10)).model_dump_json())
        reply(task)
        logs.append(job_id, "chief:0", 0, 3, ["line 3"])
        with subscribe(client, job_id, cursor) as stream:
            resumed = frames_until(stream, "history_end")
    assert [f["type"] for f in resumed] == ["metrics", "log", "history_end"]
    assert resumed[0]["series"]["loss"][0] == [80, 90]
    assert resumed[1]["lines"] == ["line 3"]


def test_a_late_subscriber_gets_the_same_history(client: TestClient) -> None:
    job_id = submit(client)
    with runtime(client, job_id) as task:
        reply(task)
        for start in range(0, 30, 10):
            task.send_text(points(range(start, start + 10)).model_dump_json())
            reply(task)
    with subscribe(client, job_id) as stream:
        first = frames_until(stream, "history_end")
    with subscribe(client, job_id) as stream:
        second = frames_until(stream, "history_end")
    steps = [s for f in first if f["type"] == "metrics" for s in f["series"]["loss"][0]]
    assert steps == [s * 10 for s in range(30)]
    assert [f["type"] for f in first] == [f["type"] for f in second]


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        ('{"type": "subscribe", "cursor": "bm90LWEtY3Vyc29y"}', "invalid cursor"),
        ('{"type": "subscribe", "since": 5}', "invalid subscribe frame: since"),
        ('{"type": "hello"}', "invalid subscribe frame: type"),
        ("[1, 2", "invalid subscribe frame"),
        ('{"type": "subscribe", "cursor": "' + "x" * 80_000 + '"}', "subscribe frame over"),
    ],
)
def test_bad_subscribe_frames_close_with_a_reason(
    client: TestClient, frame: str, reason: str
) -> None:
    job_id = submit(client)
    with client.websocket_connect(f"/jobs/{job_id}/stream?token={ADMIN_TOKEN}") as ws:
        ws.send_text(frame)
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    assert closed.value.code in (1008, 1009)
    assert reason in closed.value.reason


def test_stream_needs_an_admin_token_and_a_real_job(client: TestClient) -> None:
    job_id = submit(client)
    with (
        client.websocket_connect(f"/jobs/{job_id}/stream?token=nope") as ws,
        pytest.raises(WebSocketDisconnect) as closed,
    ):
        ws.receive_text()
    assert closed.value.code == 1008 and "admin or viewer token" in closed.value.reason
    with subscribe(client, 999) as ws, pytest.raises(WebSocketDisconnect) as closed:
        ws.receive_text()
    assert closed.value.reason == "job 999 does not exist"


def test_cluster_stream_carries_every_jobs_events(client: TestClient) -> None:
    first = submit(client)
    with client.websocket_connect(f"/stream?token={ADMIN_TOKEN}") as ws:
        ws.send_text('{"type": "subscribe"}')
        history = frames_until(ws, "history_end")
        assert [f["job_id"] for f in history if f["type"] == "event"] == [first]
        second = submit(client)
        deadline = time.monotonic() + 5
        live = json.loads(ws.receive_text())
        assert time.monotonic() < deadline
        assert (live["job_id"], live["event"]["kind"]) == (second, "created")


# --- the ingestor itself: writers, order per attempt, conflicts, failures ----------------------


def wire(seqs: range) -> list[MetricPoint]:
    return list(points(seqs).points)


async def stored_seqs(api: Api, key: AttemptKey) -> list[int]:
    async with api.session() as session:
        rows = await session.scalars(
            select(StoredPoint.seq)
            .where(
                StoredPoint.job_id == key[0],
                StoredPoint.task == key[1],
                StoredPoint.attempt == key[2],
            )
            .order_by(StoredPoint.seq)
        )
        return list(rows)


@asynccontextmanager
async def running(ingestor: Ingestor) -> AsyncIterator[Ingestor]:
    runner = asyncio.create_task(ingestor.run())
    try:
        yield ingestor
    finally:
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def test_two_writers_never_store_one_attempt_twice_at_once(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingestor = Ingestor(api.app.state.sessions, Broker(), writers=2)  # type: ignore[attr-defined]
    a, c = (1, "worker:0", 0), (1, "worker:1", 0)
    for key in (a, c):
        await ingestor.stored_through(key)
    writes: list[list[tuple[str, int]]] = []
    gate = asyncio.Event()
    write = ingestor._write

    async def held_first_write(batch: list[Any]) -> None:
        writes.append([(pending.key[1], pending.points[0].seq) for pending in batch])
        if len(writes) == 1:
            await gate.wait()  # the first write stays in flight until released
        await write(batch)

    monkeypatch.setattr(ingestor, "_write", held_first_write)
    async with running(ingestor):
        first = asyncio.create_task(ingestor.submit(a, wire(range(0, 10))))
        await until(lambda: a in ingestor._in_flight)
        second = asyncio.create_task(ingestor.submit(a, wire(range(10, 20))))
        other = asyncio.create_task(ingestor.submit(c, wire(range(0, 10))))
        # The second writer stores the other attempt meanwhile, and holds a's next batch back.
        assert await asyncio.wait_for(other, 10) == 9
        assert not first.done() and not second.done()
        assert await stored_seqs(api, a) == []
        gate.set()
        assert await asyncio.wait_for(first, 10) == 9
        assert await asyncio.wait_for(second, 10) == 19
    assert writes == [[("worker:0", 0)], [("worker:1", 0)], [("worker:0", 10)]]
    assert await stored_seqs(api, a) == list(range(20))
    assert await stored_seqs(api, c) == list(range(10))


async def test_batches_queued_together_are_stored_in_order(api: Api) -> None:
    ingestor = Ingestor(api.app.state.sessions, Broker(), writers=2)  # type: ignore[attr-defined]
    keys = [(1, f"worker:{i}", 0) for i in range(3)]
    for key in keys:
        await ingestor.stored_through(key)
    async with running(ingestor):
        # Several batches per attempt at once, a resend among them: acks never go backwards.
        batches = [(key, range(first, first + 25)) for first in (0, 25, 10, 50) for key in keys]
        acks = await asyncio.gather(*(ingestor.submit(key, wire(seqs)) for key, seqs in batches))
    for key in keys:
        mine = [ack for (k, _), ack in zip(batches, acks, strict=True) if k == key]
        assert mine == sorted(mine) and mine[-1] == 74
        assert await stored_seqs(api, key) == list(range(75))
    assert ingestor.points_written == 3 * 75


async def test_points_another_writer_stored_are_not_stored_twice(api: Api) -> None:
    ingestor = Ingestor(api.app.state.sessions, Broker(), writers=2)  # type: ignore[attr-defined]
    key = (1, "chief:0", 0)
    assert await ingestor.stored_through(key) == -1
    # Another server process on the same database stored some of them behind our back.
    async with api.session() as session:
        await session.execute(
            insert(StoredPoint),
            [
                {"job_id": 1, "task": "chief:0", "attempt": 0, "seq": s, "name": "loss"}
                | {"step": s, "value": 0.5, "wall_time": 1e9}
                for s in range(5)
            ],
        )
        await session.commit()
    async with running(ingestor):
        assert await ingestor.submit(key, wire(range(10))) == 9
        assert await ingestor.submit(key, wire(range(10, 12))) == 11
    assert await stored_seqs(api, key) == list(range(12))
    assert ingestor.points_written == 12
    # PostgreSQL inserts without ON CONFLICT first, and retried this one write with it.
    dialect = api.app.state.engine.dialect.name  # type: ignore[attr-defined]
    assert ingestor.conflicts == (1 if dialect == "postgresql" else 0)


async def test_a_failed_write_is_not_acked_and_its_resend_is_stored(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingestor = Ingestor(api.app.state.sessions, Broker(), writers=2)  # type: ignore[attr-defined]
    key = (1, "chief:0", 0)
    await ingestor.stored_through(key)
    write = ingestor._write
    failures = [RuntimeError("database went away")]

    async def failing_once(batch: list[Any]) -> None:
        if failures:
            raise failures.pop()
        await write(batch)

    monkeypatch.setattr(ingestor, "_write", failing_once)
    async with running(ingestor):
        with pytest.raises(RuntimeError, match="went away"):
            await ingestor.submit(key, wire(range(10)))
        assert await ingestor.stored_through(key) == -1  # nothing acknowledged, nothing skipped
        assert await ingestor.submit(key, wire(range(10))) == 9
    assert await stored_seqs(api, key) == list(range(10))


def test_postgres_gets_two_writers_and_sqlite_one(database_url: str) -> None:
    engine = create_engine(async_database_url(database_url))
    ingestor = Ingestor(session_factory(engine), Broker())
    expected = POSTGRES_WRITERS if database_url.startswith("postgresql") else 1
    assert ingestor._default_writers() == expected


def test_finished_attempts_are_forgotten_and_a_live_ones_resend_is_still_known(
    client: TestClient,
) -> None:
    ingestor: Ingestor = client.app.state.ingestor  # type: ignore[attr-defined]
    for _ in range(20):  # attempts that stream, then end (their channel closes for good)
        with runtime(client, submit(client)) as ws:
            assert reply(ws) == TaskWelcome(next_seq=0)
            ws.send_text(points(range(0, 5)).model_dump_json())
            assert reply(ws) == Ack(seq=4)
            assert ingestor.attempts_tracked == 1
        assert ingestor.attempts_tracked == 0
    live = submit(client)
    with runtime(client, live) as ws:
        reply(ws)
        ws.send_text(points(range(0, 10)).model_dump_json())
        assert reply(ws) == Ack(seq=9)
        with runtime(client, submit(client)) as other:  # another attempt comes and goes
            reply(other)
            other.send_text(points(range(0, 5)).model_dump_json())
            assert reply(other) == Ack(seq=4)
        written = ingestor.points_written
        ws.send_text(points(range(0, 10)).model_dump_json())  # a resend of the live attempt
        assert reply(ws) == Ack(seq=9)
        # Dropped by its high-water mark, not left to the database's unique key.
        assert (ingestor.points_written, ingestor.conflicts) == (written, 0)
        assert ingestor.attempts_tracked == 1
    assert ingestor.attempts_tracked == 0
    (series,) = client.get(f"/jobs/{live}/metrics", headers=ADMIN).json()["series"]
    assert series["total_points"] == 10
