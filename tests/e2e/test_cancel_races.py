"""A cancel that answered 200 holds, whatever ran at the same moment.

Jobs are cancelled at a random moment in their first half second, while the controller is
placing them, starting their tasks, or restarting them by request. Every cancel that answered
200 must leave its job cancelled, and no process of the job alive a few seconds later (read
from /proc, where the agent tags each task with STRATA_JOB_ID). Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.cluster import Cluster, job_processes, local_cluster
from tests.support.factories import sleeper_spec
from tests.support.postgres import create_database
from tests.support.replicas import replica_set

pytestmark = pytest.mark.e2e

JOBS = 100
CANCEL_WITHIN = 0.5  # seconds after the job's submission (or its restart request)
SETTLE_SECONDS = 30.0  # for every process of the cancelled jobs to be gone


@pytest.fixture(scope="module", params=["sqlite", "postgresql", "replicas"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """One server on SQLite or PostgreSQL; or two replicas on PostgreSQL, the requests sent to
    the follower and the placement done by the leader (agents behind HAProxy)."""
    data_dir = tmp_path_factory.mktemp(f"races-{request.param}") / "data"
    if request.param == "sqlite":
        with local_cluster(data_dir) as running:
            yield running
        return
    admin_url: str = request.getfixturevalue("postgres_admin_url")
    url = asyncio.run(create_database(admin_url, "strata_races"))
    if request.param == "postgresql":
        with local_cluster(data_dir, database_url=url) as running:
            yield running
        return
    with replica_set(data_dir, url, replicas=2, agents=2) as replicas:
        leader = replicas.wait_leader()
        (follower,) = [r for r in replicas.replicas if r is not leader]
        through = replicas.through(follower)
        try:
            yield through
        finally:
            through.http.close()


# The jobs restart on failure, so that a rival restart has something to do.
RESTART = {"policy": "on_failure", "max_restarts": 3, "backoff_seconds": 0}


# What races the cancel: given a client and the job, it sends its own request(s).
Rival = Callable[[httpx.Client, int], None]


def race(cluster: Cluster, name: str, rival: Rival | None) -> list[tuple[int, httpx.Response]]:
    """Submit JOBS jobs; for each, the rival (if any) and a cancel at random moments within
    CANCEL_WITHIN seconds of its submission, concurrently. Returns each job's cancel answer."""
    rng = random.Random(f"{name}-{JOBS}")

    def one(index: int) -> tuple[int, httpx.Response]:
        with httpx.Client(
            base_url=cluster.url,
            headers={"Authorization": f"Bearer {cluster.admin_token}"},
            timeout=60,
        ) as http:
            submitted = http.post("/jobs", json=sleeper_spec(f"{name}-{index}", RESTART))
            assert submitted.status_code == 201, submitted.text
            job_id = submitted.json()["id"]
            start = time.monotonic()
            cancel_at = rng.uniform(0, CANCEL_WITHIN)
            if rival is not None:
                time.sleep(rng.uniform(0, CANCEL_WITHIN))
                rival(http, job_id)
            time.sleep(max(0.0, start + cancel_at - time.monotonic()))
            return job_id, http.post(f"/jobs/{job_id}/cancel")

    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(one, range(JOBS)))


def assert_cancels_held(cluster: Cluster, answers: list[tuple[int, httpx.Response]]) -> None:
    cancelled = [job_id for job_id, answer in answers if answer.status_code == 200]
    refused = [(job_id, answer.text) for job_id, answer in answers if answer.status_code != 200]
    # Nothing else ends these jobs, so every cancel must have been accepted.
    assert not refused, refused
    for _, answer in answers:
        assert answer.json()["status"] == "cancelled", answer.text
    deadline = time.monotonic() + SETTLE_SECONDS
    alive: dict[int, list[int]] = {}
    while time.monotonic() < deadline:
        alive = {
            job_id: pids
            for job_id in cancelled
            if (pids := job_processes(job_id, cluster.tasks_reach))
        }
        if not alive:
            break
        time.sleep(0.5)
    assert not alive, f"processes of cancelled jobs still alive: {alive}"
    # Still cancelled once everything has settled, and no task live or about to start (an
    # exit is recorded once the agent's report of it is applied: a moment after it happened).
    unsettled = list(cancelled)
    while unsettled and time.monotonic() < deadline + SETTLE_SECONDS:
        unsettled = [job_id for job_id in unsettled if not settled(cluster.job(job_id))]
        time.sleep(0.5)
    for job_id in unsettled:
        job = cluster.job(job_id)
        history = [(e["at"][11:23], e["task"], e["message"]) for e in cluster.events(job_id)]
        tasks = [(t["name"], t["status"], t["attempt"], t["host"]) for t in job["tasks"]]
        raise AssertionError((job_id, job["status"], job["reason"], tasks, history))


def settled(job: dict[str, Any]) -> bool:
    """Cancelled, with every task over."""
    live = [t for t in job["tasks"] if t["status"] in ("pending", "scheduled", "running")]
    assert job["status"] == "cancelled", job
    return not live


def test_cancel_while_placing(cluster: Cluster) -> None:
    assert_cancels_held(cluster, race(cluster, "cancel-placing", None))


def test_cancel_racing_a_job_restart(cluster: Cluster) -> None:
    def restart(http: httpx.Client, job_id: int) -> None:
        http.post(f"/jobs/{job_id}/restart")  # 409 while it is still pending: that's fine

    assert_cancels_held(cluster, race(cluster, "cancel-job-restart", restart))


def test_cancel_racing_a_task_restart(cluster: Cluster) -> None:
    def restart(http: httpx.Client, job_id: int) -> None:
        http.post(f"/jobs/{job_id}/tasks/chief:0/restart")

    assert_cancels_held(cluster, race(cluster, "cancel-task-restart", restart))


def test_cancel_racing_an_evaluator_start(cluster: Cluster) -> None:
    def start(http: httpx.Client, job_id: int) -> None:
        http.post(f"/jobs/{job_id}/evaluator", json={"action": "start"})

    assert_cancels_held(cluster, race(cluster, "cancel-evaluator", start))


def test_the_process_check_is_not_vacuous(cluster: Cluster) -> None:
    """The same check finds the process of a job that was not cancelled."""
    job = cluster.submit(sleeper_spec("not-cancelled", RESTART))
    cluster.wait_status(job["id"], "running", timeout=60)
    assert job_processes(job["id"], cluster.tasks_reach)
    assert cluster.http.post(f"/jobs/{job['id']}/cancel").status_code == 200
    deadline = time.monotonic() + SETTLE_SECONDS
    while job_processes(job["id"], cluster.tasks_reach) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not job_processes(job["id"], cluster.tasks_reach)
