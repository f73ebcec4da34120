"""One name, one host: a second agent started under a connected agent's name is refused.

A real `strata up` (server and two agents) runs a sleeping job; then a second `strata agent`
with the name of the host the job runs on, but its own state dir (a cloned machine, another
host with the same hostname), is started. It must be refused once, exit non-zero with the
clash in its message, and leave the first agent and its job alone: the job's task is neither
restarted nor failed, and its process is the one that ran before.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import REPO, Cluster, job_processes, local_cluster
from tests.support.processes import STRATA

pytestmark = pytest.mark.e2e

SLEEPER = {
    "name": "sleeper",
    "strategy": "mirrored",
    "entrypoint": ["python", "-c", "import time; time.sleep(600)"],
    "replicas": {"chief": {"count": 1, "gpus": 0}},
    "restart": {"policy": "on_failure", "max_restarts": 3, "backoff_seconds": 0},
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("identity") / "data") as running:
        yield running


def test_a_second_agent_under_a_connected_name_is_refused_and_the_first_runs_on(
    cluster: Cluster, tmp_path: Path
) -> None:
    job = cluster.submit(SLEEPER)
    running = cluster.wait_status(job["id"], "running", timeout=60)
    (task,) = running["tasks"]
    host, pid = task["host"], task["pid"]
    assert host in ("local-0", "local-1") and pid

    started = time.monotonic()
    clone = subprocess.run(
        [
            *STRATA,
            "agent",
            "--server",
            cluster.url,
            "--name",
            host,
            "--gpus",
            "2",
            "--port-range",
            "29000-29099",
            "--workspace",
            str(REPO),
            "--state-dir",
            str(tmp_path / "clone-state"),  # another machine: another identity
        ],
        env={**os.environ, "STRATA_AGENT_TOKEN": cluster.agent_token},
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = clone.stdout + clone.stderr
    clash = (
        f"{host} is already connected from 127.0.0.1 with another identity; "
        "start this agent with another --name"
    )
    assert clone.returncode != 0, output
    assert f"refused by the server: {clash}" in clone.stderr, output
    assert output.count("server refused this agent") == 1, output  # once: no retries
    assert time.monotonic() - started < 30, output

    # The first agent and its job are undisturbed: the same attempt of the task, with the
    # same process, runs on; the host is online from where it was.
    time.sleep(3)  # what a flapping agent would have broken by now (it took under a second)
    after = cluster.job(job["id"])
    assert after["status"] == "running", after
    assert [(t["status"], t["attempt"], t["host"], t["pid"]) for t in after["tasks"]] == [
        ("running", 0, host, pid)
    ]
    events = [e["message"] for e in cluster.events(job["id"])]
    assert not [m for m in events if "restart" in m or "lost" in m or "fail" in m], events
    hosts = {h["name"]: h for h in cluster.http.get("/hosts").json()}
    assert hosts[host]["status"] == "online" and hosts[host]["port_range"] != [29000, 29099]
    assert pid in job_processes(job["id"], cluster.url)

    cancelled = cluster.http.post(f"/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    cluster.wait_status(job["id"], "cancelled", timeout=60)
    deadline = time.monotonic() + 30
    while job_processes(job["id"], cluster.url):
        assert time.monotonic() < deadline, job_processes(job["id"], cluster.url)
        time.sleep(0.3)
