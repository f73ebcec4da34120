"""Three server replicas on one PostgreSQL behind a real HAProxy, two agents, PS and MWM jobs
training: the leader is killed, paused past its lease, and every replica restarted in turn.
Nothing acknowledged is lost, no task of a running job is restarted or started twice, and a
dashboard stream resumes on another replica with no gap and no duplicate."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.support.factories import digits_spec, sleeper_spec
from tests.support.postgres import create_database
from tests.support.replicas import ReplicaSet, replica_set

pytestmark = pytest.mark.e2e

EPOCHS = 16
STEPS_PER_EPOCH = 60
EPOCH_LINE = re.compile(r"^epoch=(\d+) loss=")
SUPERSEDED_EXIT = 75


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, postgres_admin_url: str
) -> Iterator[ReplicaSet]:
    url = asyncio.run(create_database(postgres_admin_url, "strata_replicas"))
    with replica_set(tmp_path_factory.mktemp("replicas"), url, replicas=3, agents=2) as running:
        yield running


@pytest.fixture(autouse=True)
def every_replica_up(cluster: ReplicaSet) -> Iterator[None]:
    """Each test starts with all three serving and ends with its jobs cancelled."""
    cluster.restore()
    cluster.wait_leader()
    yield
    cluster.restore()
    page = cluster.http.get("/jobs", params={"status": ["pending", "running"], "limit": 500})
    for job in page.json()["items"]:
        cluster.http.post(f"/jobs/{job['id']}/cancel")


def epochs_logged(cluster: ReplicaSet, job_id: int, task: str) -> list[int]:
    return [int(m[1]) for line in cluster.logs(job_id, task) if (m := EPOCH_LINE.match(line))]


def training_jobs(cluster: ReplicaSet, epochs: int = EPOCHS) -> list[dict[str, Any]]:
    """A PS and an MWM job, each past its second epoch."""
    jobs = [
        cluster.submit(
            digits_spec("digits_ps.yaml", epochs=epochs, steps_per_epoch=STEPS_PER_EPOCH)
        ),
        cluster.submit(
            digits_spec("digits_mwm.yaml", epochs=epochs, steps_per_epoch=STEPS_PER_EPOCH)
        ),
    ]
    for job, task in zip(jobs, ("chief:0", "worker:0"), strict=True):

        def past_epoch_2(found: dict[str, Any], task: str = task) -> bool:
            return len(epochs_logged(cluster, found["id"], task)) >= 2

        cluster.wait_for(job["id"], past_epoch_2, 240, "at epoch 2")
    return jobs


def assert_trained_untouched(cluster: ReplicaSet, jobs: list[dict[str, Any]], epochs: int) -> None:
    """Each job succeeded with no task restarted or started twice, every epoch logged once,
    and every loss point stored."""
    for job in jobs:
        done = cluster.wait_status(job["id"], "succeeded", timeout=300)
        assert [t["attempt"] for t in done["tasks"]] == [0] * len(done["tasks"]), done["tasks"]
        assert done["restart_count"] == 0
        moved = [e for e in cluster.events(job["id"]) if e["data"].get("to") in ("lost", "failed")]
        assert not moved, moved
        for task in done["tasks"]:
            starts = sum(
                f"started {task['name']} of job {job['id']} (attempt 0," in agent_log
                for agent_log in agent_logs(cluster)
            )
            assert starts == 1, (task["name"], starts)
    ps = jobs[0]
    assert epochs_logged(cluster, ps["id"], "chief:0") == list(range(1, epochs + 1))
    metrics = cluster.http.get(
        f"/jobs/{ps['id']}/metrics", params={"names": "loss", "task": "chief:0"}
    ).json()
    (loss,) = metrics["series"]
    assert loss["total_points"] == epochs


def agent_logs(cluster: ReplicaSet) -> list[str]:
    return [path.read_text() for path in sorted(cluster.data_dir.glob("agent-ha-*.log"))]


class Requests:
    """Submissions, cancels and job lists sent through the load balancer on a thread of their
    own: every answer noted, acknowledged or not."""

    def __init__(self, cluster: ReplicaSet) -> None:
        self.http = httpx.Client(
            base_url=cluster.url,
            headers={"Authorization": f"Bearer {cluster.admin_token}"},
            timeout=30,
        )
        self.submitted: list[int] = []
        self.cancelled: list[int] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Requests:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.http.close()

    def _run(self) -> None:
        index = 0
        while not self._stop.is_set():
            index += 1
            try:
                answer = self.http.post("/jobs", json=sleeper_spec(f"ack-{index}"))
                if answer.status_code == 201:
                    self.submitted.append(answer.json()["id"])
                else:
                    self.failed.append(f"submit: {answer.status_code} {answer.text}")
                if index % 2 == 0 and self.submitted:
                    job_id = self.submitted[-1]
                    cancel = self.http.post(f"/jobs/{job_id}/cancel")
                    if cancel.status_code == 200:
                        self.cancelled.append(job_id)
                    else:
                        self.failed.append(f"cancel: {cancel.status_code} {cancel.text}")
                listed = self.http.get("/jobs", params={"limit": 5})
                if listed.status_code != 200:
                    self.failed.append(f"list: {listed.status_code} {listed.text}")
            except httpx.HTTPError as exc:
                self.failed.append(repr(exc))
            time.sleep(0.2)

    def assert_held(self, cluster: ReplicaSet) -> None:
        """Every acknowledged submission is there, and every acknowledged cancel held."""
        assert self.submitted, self.failed
        for job_id in self.submitted:
            job = cluster.job(job_id)
            assert job["id"] == job_id
            if job_id in self.cancelled:
                assert job["status"] == "cancelled", job


class ResumingStream:
    """A job's dashboard stream through the load balancer, on a thread: when the connection
    drops it reconnects and resumes from the last cursor it got."""

    def __init__(self, cluster: ReplicaSet, job_id: int) -> None:
        self.url = (
            cluster.url.replace("http://", "ws://")
            + f"/jobs/{job_id}/stream?token={cluster.admin_token}"
        )
        self.frames: list[dict[str, Any]] = []
        self.connections = 0
        self.closes: list[int | None] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ResumingStream:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        cursor: str | None = None
        while not self._stop.is_set():
            try:
                with connect(self.url, max_size=None, open_timeout=10) as websocket:
                    self.connections += 1
                    websocket.send(json.dumps({"type": "subscribe", "cursor": cursor}))
                    while not self._stop.is_set():
                        try:
                            frame = json.loads(websocket.recv(timeout=0.5))
                        except TimeoutError:
                            continue
                        self.frames.append(frame)
                        cursor = frame.get("cursor", cursor)
            except (OSError, ConnectionClosed, TimeoutError) as exc:
                self.closes.append(getattr(getattr(exc, "rcvd", None), "code", None))
                time.sleep(0.2)


def assert_no_gap_no_duplicate(stream: ResumingStream, cluster: ReplicaSet, job_id: int) -> None:
    """What the stream delivered across its connections is what the server stored, each once."""
    lines: dict[tuple[str, int], list[str]] = {}
    steps: dict[tuple[str, int, str], list[int]] = {}
    events: list[int] = []
    for frame in stream.frames:
        if frame["type"] == "log":
            key = (frame["task"], frame["attempt"])
            got = lines.setdefault(key, [])
            assert frame["first_line"] == len(got), (key, frame["first_line"], len(got))
            got.extend(frame["lines"])
        elif frame["type"] == "metrics":
            for name, (series_steps, _values, _times) in frame["series"].items():
                steps.setdefault((frame["task"], frame["attempt"], name), []).extend(series_steps)
        elif frame["type"] in ("event", "checkpoint"):
            events.append(frame["event"]["id"])
    assert lines[("chief:0", 0)] == cluster.logs(job_id, "chief:0")
    stored = cluster.http.get(
        f"/jobs/{job_id}/metrics", params={"names": "loss", "task": "chief:0"}
    ).json()["series"][0]["steps"]
    assert steps[("chief:0", 0, "loss")] == stored
    assert events == [e["id"] for e in cluster.events(job_id)]


def test_the_leader_is_killed_and_another_takes_over_losing_nothing(cluster: ReplicaSet) -> None:
    jobs = training_jobs(cluster)
    old = cluster.wait_leader()
    with ResumingStream(cluster, jobs[0]["id"]) as stream, Requests(cluster) as requests:
        time.sleep(2)
        old.kill()
        killed = time.monotonic()
        placed = cluster.submit(sleeper_spec("after-the-kill"))
        cluster.wait_status(placed["id"], "running", timeout=60)
        print(f"leader killed: a job submitted then ran {time.monotonic() - killed:.2f} s later")
        new = cluster.wait_leader(other_than=old)
        time.sleep(3)
        assert_trained_untouched(cluster, jobs, EPOCHS)
        time.sleep(2)  # the last frames
    requests.assert_held(cluster)
    assert stream.connections >= 2, stream.closes  # it was cut off, and resumed
    assert_no_gap_no_duplicate(stream, cluster, jobs[0]["id"])
    listed = cluster.http.get("/replicas").json()
    assert listed["leader"] == (new.health() or {})["replica"]


def test_a_leader_paused_past_its_lease_writes_nothing_and_stops(cluster: ReplicaSet) -> None:
    jobs = training_jobs(cluster)
    old = cluster.wait_leader()
    with Requests(cluster) as requests:
        old.signal(signal.SIGSTOP)
        new = cluster.wait_leader(other_than=old)
        placed = cluster.submit(sleeper_spec("while-paused"))
        cluster.wait_status(placed["id"], "running", timeout=60)
        time.sleep(3)
        old.signal(signal.SIGCONT)
        # It finds another replica leading: superseded, it stops for its supervisor.
        assert old.process is not None
        assert old.process.wait(timeout=60) == SUPERSEDED_EXIT
        assert cluster.leader() is new
        cluster.restore()  # as its supervisor would: back as a follower
        assert (old.health() or {})["role"] == "follower"
    log = (old.data_dir.parent / f"replica-{old.index}.log").read_text()
    assert "superseded" in log
    assert_trained_untouched(cluster, jobs, EPOCHS)
    requests.assert_held(cluster)


def test_a_rolling_restart_refuses_no_request_and_restarts_no_task(cluster: ReplicaSet) -> None:
    jobs = training_jobs(cluster)
    with Requests(cluster) as requests:
        for replica in cluster.replicas:
            assert replica.process is not None
            replica.signal(signal.SIGTERM)  # a graceful stop: a leader gives its lease up
            # uvicorn stops gracefully, then raises the signal it caught again.
            assert replica.process.wait(timeout=60) in (0, -signal.SIGTERM)
            replica.start()
            cluster.wait_leader()
            time.sleep(2)
    assert not requests.failed, requests.failed
    requests.assert_held(cluster)
    assert_trained_untouched(cluster, jobs, EPOCHS)
