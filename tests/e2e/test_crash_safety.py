"""Crash safety: SIGKILL the server while runtimes stream metrics into it and a client submits
jobs, start it again on the same database, and check that nothing acknowledged was lost, that
no job was half written and that no metric point was stored twice (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx
import pytest
from pydantic import SecretStr
from websockets.sync.client import connect

from agents.protocol import (
    Ack,
    MetricBatch,
    MetricPoint,
    TaskHello,
    TaskWelcome,
    runtime_server_message,
)
from backend.auth import TokenKind, TokenRegistry
from tests.conftest import ADMIN_TOKEN, AGENT_TOKEN
from tests.support.factories import make_spec
from tests.support.postgres import free_port
from tests.support.processes import STRATA, stop, wait_healthy

pytestmark = pytest.mark.e2e
TASKS = ("chief:0", "worker:0", "worker:1", "ps:0")  # the parameter_server spec's four
BATCH = 500


class Server:
    """`strata server` on one database and data dir, killed and started again at will."""

    def __init__(self, database_url: str, data_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")} | {
            "STRATA_API_TOKEN": ADMIN_TOKEN,
            "STRATA_AGENT_TOKEN": AGENT_TOKEN,
            "STRATA_DATA_DIR": str(data_dir),
            "STRATA_DATABASE_URL": database_url,
            "STRATA_PORT": str(self.port),
        }
        self.log = data_dir.parent / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [*STRATA, "server"], env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        wait_healthy(self.url, self.process)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


@dataclass
class Acknowledged:
    """What the server confirmed before it died."""

    jobs: list[int] = field(default_factory=list)
    seqs: dict[str, int] = field(default_factory=dict)  # task → highest acknowledged seq
    lock: threading.Lock = field(default_factory=threading.Lock)


def stream(url: str, token: str, task: str, acked: Acknowledged, stop: threading.Event) -> None:
    """A runtime sending batches of points, each after the previous one was acknowledged."""
    seq = 0
    with (
        contextlib.suppress(Exception),
        connect(
            url.replace("http://", "ws://") + "/tasks/connect",
            additional_headers={"Authorization": f"Bearer {token}"},
            max_size=None,
        ) as ws,
    ):
        ws.send(TaskHello(task=task, attempt=0).model_dump_json())
        assert isinstance(runtime_server_message.validate_json(ws.recv()), TaskWelcome)
        while not stop.is_set():
            points = [
                MetricPoint(seq=s, name="loss", step=s, value=1.0 / (s + 1), wall_time=time.time())
                for s in range(seq, seq + BATCH)
            ]
            ws.send(MetricBatch(points=points).model_dump_json())
            ack = runtime_server_message.validate_json(ws.recv(timeout=30))
            assert isinstance(ack, Ack) and ack.seq == seq + BATCH - 1
            with acked.lock:
                acked.seqs[task] = ack.seq
            seq += BATCH


def submit(url: str, acked: Acknowledged, stop: threading.Event) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as http:
        while not stop.is_set():
            try:
                answer = http.post("/jobs", json=make_spec(), timeout=10)
            except httpx.HTTPError:
                return
            if answer.status_code == 201:
                with acked.lock:
                    acked.jobs.append(answer.json()["id"])


def rows(database_url: str, query: str) -> list[tuple[object, ...]]:
    if database_url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(database_url.removeprefix("sqlite:///"))) as db:
            return db.execute(query).fetchall()

    async def fetch() -> list[tuple[object, ...]]:
        connection = await asyncpg.connect(database_url)
        try:
            return [tuple(record) for record in await connection.fetch(query)]
        finally:
            await connection.close()

    return asyncio.run(fetch())


def point_stats(database_url: str, job_id: int) -> dict[str, tuple[int, int, int]]:
    """Per task of the job: points stored, distinct sequence numbers, the highest one."""
    found = rows(
        database_url,
        "SELECT job_id, task, COUNT(*), COUNT(DISTINCT seq), MAX(seq) FROM metric_points "
        "GROUP BY job_id, task",
    )
    return {
        str(task): (int(str(count)), int(str(unique)), int(str(top)))
        for job, task, count, unique, top in found
        if job == job_id
    }


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[Server]:
    running = Server(database_url, tmp_path / "data")
    running.start()
    try:
        yield running
    finally:
        if running.process is not None:
            stop(running.process)


def test_a_killed_server_loses_nothing_it_acknowledged(server: Server, database_url: str) -> None:
    http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    job_id = http.post("/jobs", json=make_spec()).json()["id"]
    registry = TokenRegistry({TokenKind.admin: SecretStr(ADMIN_TOKEN), TokenKind.agent: None})
    token = registry.task_token(job_id)
    acked, halt = Acknowledged(), threading.Event()
    workers = [
        threading.Thread(target=stream, args=(server.url, token, task, acked, halt))
        for task in TASKS
    ] + [threading.Thread(target=submit, args=(server.url, acked, halt))]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + 60
    while len(acked.seqs) < len(TASKS) or min(acked.seqs.values()) < 3 * BATCH:
        assert time.monotonic() < deadline, f"too slow to start: {acked.seqs}"
        time.sleep(0.1)
    time.sleep(1.0)  # mid-stream: batches and submissions in flight

    server.kill()
    halt.set()
    for worker in workers:
        worker.join(timeout=60)
    with acked.lock:
        jobs, seqs = list(acked.jobs), dict(acked.seqs)
    assert jobs, "no submission was acknowledged before the kill"
    server.start()

    # Every acknowledged job is there, whole; no job anywhere is half written.
    for acknowledged in jobs:
        answer = http.get(f"/jobs/{acknowledged}")
        assert answer.status_code == 200, acknowledged
        assert len(answer.json()["tasks"]) == len(TASKS)
    per_job = rows(
        database_url,
        "SELECT jobs.id, COUNT(tasks.id) FROM jobs LEFT JOIN tasks ON tasks.job_id = jobs.id "
        "GROUP BY jobs.id",
    )
    assert {count for _, count in per_job} == {len(TASKS)}, per_job
    assert len(per_job) >= len(jobs) + 1

    # Every acknowledged point is stored, once, and numbering has no gap.
    stats = point_stats(database_url, job_id)
    for task in TASKS:
        count, unique, top = stats[task]
        assert count == unique == top + 1, (task, stats)
        assert top >= seqs[task], (task, stats, seqs)

    # A runtime coming back resends what it had not seen acknowledged; the server stores
    # only what it lacks and numbering goes on where it stopped.
    task = TASKS[0]
    with connect(
        server.url.replace("http://", "ws://") + "/tasks/connect",
        additional_headers={"Authorization": f"Bearer {token}"},
        max_size=None,
    ) as ws:
        ws.send(TaskHello(task=task, attempt=0).model_dump_json())
        welcome = runtime_server_message.validate_json(ws.recv())
        assert welcome == TaskWelcome(next_seq=stats[task][2] + 1)
        first = seqs[task] + 1
        points = [
            MetricPoint(seq=s, name="loss", step=s, value=0.5, wall_time=time.time())
            for s in range(first, first + 2 * BATCH)
        ]
        ws.send(MetricBatch(points=points).model_dump_json())
        assert runtime_server_message.validate_json(ws.recv(timeout=30)) == Ack(
            seq=first + 2 * BATCH - 1
        )
    count, unique, _ = point_stats(database_url, job_id)[task]
    assert count == unique == first + 2 * BATCH
    http.close()
