"""`strata up` stops everything it started when interrupted, running jobs included."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.cluster import job_processes, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e


def test_ctrl_c_stops_agents_and_their_running_tasks(tmp_path: Path) -> None:
    with local_cluster(tmp_path / "data", agents=1) as cluster:
        job = cluster.submit(
            {
                "name": "long-runner",
                "strategy": "multi_worker_mirrored",
                "entrypoint": ["python", "-c", "import time; time.sleep(600)"],
                "replicas": {"worker": {"count": 2}},
            }
        )
        cluster.wait_status(job["id"], "running", timeout=60)
        assert len(job_processes(job["id"], cluster.url)) == 2
        agents = cluster.agent_pids()
        assert len(agents) == 1
        cluster.process.send_signal(signal.SIGINT)  # what Ctrl-C sends
        # uvicorn re-raises SIGINT once it has shut down: 130 is the shell's code for Ctrl-C.
        assert cluster.process.wait(timeout=60) in (0, 130)
    wait_no_processes(job["id"], timeout=10, server=cluster.url)
    for pid in agents:
        assert (
            not Path(f"/proc/{pid}").exists()
            or "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
        )


def test_the_console_shows_agents_and_jobs_not_requests(tmp_path: Path) -> None:
    """The access log is off: the console has a line per agent joining and leaving and per job
    change, none per request (the cluster helper polls /hosts and /jobs/{id} meanwhile)."""
    data = tmp_path / "data"
    with local_cluster(data, agents=1) as cluster:
        job = cluster.submit(
            {
                "name": "hello",
                "strategy": "mirrored",
                "entrypoint": ["python", "-c", "print('hello')"],
                "replicas": {"worker": {"count": 1}},
            }
        )
        cluster.wait_status(job["id"], "succeeded", timeout=60)
        cluster.process.send_signal(signal.SIGINT)
        assert cluster.process.wait(timeout=60) in (0, 130)
    console = (data / "up.log").read_text()
    job_id = job["id"]
    for line in (
        "backend.api.agent_channel: agent local-0 joined",
        f"backend.jobs: job {job_id} submitted with 1 tasks",
        f"backend.jobs: job {job_id} pending → scheduled: placed on local-0",
        f"backend.jobs: job {job_id} scheduled → running",
        f"backend.jobs: job {job_id} running → succeeded: worker:0 exited with code 0",
        "backend.api.agent_channel: agent local-0 disconnected",
    ):
        assert line in console, console
    for request_line in ('"GET /', '"POST /', '"WebSocket /', "connection open"):
        assert request_line not in console, console
