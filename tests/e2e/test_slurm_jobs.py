"""A parameter-server job on a real two-node Slurm cluster: one Slurm job, an agent per node.

`strata server` with the Slurm backend on; Slurm (tests/support/slurm.py) runs the batch
script, which srun's the real `strata agent` on n1 and n2 with the job's agent token. Both
nodes are this machine and every agent is given the same port range, as on a real cluster: each
claims its own ports in it machine-wide, so agents sharing a node (or a machine) never collide.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.cluster import wait_no_processes
from tests.support.postgres import free_port
from tests.support.processes import STRATA, stop, wait_healthy
from tests.support.slurm import SlurmCluster, slurm_cluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EPOCH_LINE = re.compile(r"epoch=(\d+) loss=([0-9.]+)")
# The agent each node runs: the real one, every one with the same port range, and no warm
# processes, like every agent the suite starts (tests/conftest.py).
AGENT = "{strata} agent --workspace {repo} --port-range 21000-21099 --warm-pool 0"
# Slurm's SIGTERM → SIGKILL; the agents' notice fits under it, checkpoint and stop included.
KILL_WAIT = 30
NOTICE = 20
STEPS_PER_EPOCH = 20  # the digits example's default


class Server:
    """`strata server` with the Slurm backend on the test cluster; restartable in place."""

    def __init__(self, data: Path, env: dict[str, str], cluster: SlurmCluster) -> None:
        self.data, self.env, self.cluster = data, env, cluster
        self.prefix = env["STRATA_SLURM_JOB_PREFIX"]
        port = free_port()
        self.env["STRATA_PORT"] = str(port)
        self.url = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {env['STRATA_API_TOKEN']}"},
            timeout=30,
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = (self.data.parent / f"server-{self.starts}.log").open("wb")
        self.process = subprocess.Popen(
            [*STRATA, "server"],
            env={**os.environ, **self.env, "STRATA_DATA_DIR": str(self.data)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        wait_healthy(self.url, self.process)

    def crash(self) -> None:
        """SIGKILL: no shutdown of any kind."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def job(self, job_id: int) -> dict[str, Any]:
        job: dict[str, Any] = self.http.get(f"/jobs/{job_id}").json()
        return job

    def submit(self, **changes: Any) -> int:
        spec = yaml.safe_load((REPO / "examples" / "digits_ps.yaml").read_text())
        spec["slurm"] = {"partition": "debug", "time_limit": "10:00"}
        spec.update(changes)
        answer = self.http.post("/jobs", json=spec)
        assert answer.status_code == 201, answer.text
        job_id: int = answer.json()["id"]
        return job_id

    def wait_for(self, job_id: int, what: str, check: Any, timeout: float = 240) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if check(job):
                return job
            if time.monotonic() > deadline or job["status"] in ("failed", "cancelled"):
                events = self.http.get(f"/jobs/{job_id}/events").json()
                raise AssertionError(
                    f"job {job_id} not {what}: {job['status']} ({job['reason']}), tasks "
                    f"{[(t['name'], t['status'], t['host'], t['attempt']) for t in job['tasks']]}"
                    f"\nevents: {[e['message'] for e in events]}\n{self.cluster.diagnostics()}"
                )
            time.sleep(0.5)

    def logs(self, job_id: int, task: str, attempt: int | None = None) -> list[str]:
        params: dict[str, int] = {"limit": 10000}
        if attempt is not None:
            params["attempt"] = attempt
        page = self.http.get(f"/jobs/{job_id}/tasks/{task}/logs", params=params)
        lines: list[str] = page.json()["lines"]
        return lines

    def epochs(self, job_id: int, attempt: int | None = None) -> list[tuple[int, float]]:
        return [
            (int(m[1]), float(m[2]))
            for line in self.logs(job_id, "chief:0", attempt)
            if (m := EPOCH_LINE.search(line))
        ]

    def named(self, job_id: int) -> list[str]:
        """The Slurm jobs (any state) under this job's name."""
        shown = self.cluster.run(
            "squeue", "--noheader", "--states=all", f"--name={self.prefix}-{job_id}", "--format=%i"
        )
        return shown.stdout.split()

    def task(self, job_id: int, name: str) -> dict[str, Any]:
        found: dict[str, Any] = next(t for t in self.job(job_id)["tasks"] if t["name"] == name)
        return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("slurm-e2e") / "data"
    data.mkdir()
    with slurm_cluster(kill_wait=KILL_WAIT) as cluster:
        env = {
            "STRATA_API_TOKEN": secrets.token_hex(16),
            "STRATA_AGENT_TOKEN": secrets.token_hex(16),
            "STRATA_SLURM_ENABLED": "1",
            "STRATA_SLURM_CONF": str(cluster.conf),
            "STRATA_SLURM_ACCOUNTING": "completion",
            "STRATA_SLURM_JOB_PREFIX": f"e2e{secrets.token_hex(3)}",
            "STRATA_SLURM_POLL_SECONDS": "1",
            "STRATA_SLURM_AGENT_NOTICE_SECONDS": str(NOTICE),
            "STRATA_SLURM_WORKDIR": str(REPO),
            "STRATA_SLURM_OUTPUT_DIR": str(cluster.root / "log"),
            "STRATA_SLURM_AGENT_COMMAND": AGENT.format(
                repo=REPO, strata=Path(sys.executable).parent / "strata"
            ),
        }
        running = Server(data, env, cluster)
        running.start()
        try:
            yield running
        finally:
            if running.process is not None:
                stop(running.process)
            running.http.close()


def test_a_parameter_server_job_runs_as_one_slurm_job_across_both_nodes(server: Server) -> None:
    job_id = server.submit()
    running = server.wait_for(job_id, "running", lambda j: j["status"] == "running")
    slurm_id = running["slurm_job_id"]
    assert server.cluster.job_state(slurm_id) == "RUNNING"  # squeue shows it while it runs
    shown = subprocess.run(
        [*STRATA, "jobs", "show", str(job_id)],
        env={
            **os.environ,
            "STRATA_SERVER": server.url,
            "STRATA_TOKEN": server.env["STRATA_API_TOKEN"],
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert f"slurm job: {slurm_id}" in shown.stdout, shown.stdout
    hosts = {t["name"]: t["host"] for t in running["tasks"]}
    nodes = {f"{server.prefix}-{job_id}-n1", f"{server.prefix}-{job_id}-n2"}
    assert set(hosts.values()) == nodes, hosts
    assert hosts["worker:0"] != hosts["worker:1"]  # one GPU per node: a worker on each
    done = server.wait_for(job_id, "succeeded", lambda j: j["status"] == "succeeded")
    curve = server.epochs(job_id)
    assert len(curve) >= 2 and curve[-1][1] < curve[0][1], curve
    metrics = server.http.get(f"/jobs/{job_id}/metrics", params={"names": "loss"}).json()
    assert metrics, "no metrics reached the server"
    assert done["slurm_job_id"] == slurm_id and server.named(job_id) == [slurm_id]
    # The allocation ends with the job: nothing of it is left.
    assert server.cluster.wait_gone_or_ended(slurm_id, timeout=60) in (None, "CANCELLED")
    wait_no_processes(job_id, server=server.url)


def test_two_slurm_jobs_sharing_a_node_both_succeed(server: Server) -> None:
    """Slurm shares a node between jobs: each job's agent runs there, with the same range."""
    one_node = {"partition": "debug", "time_limit": "10:00", "sbatch_options": ["--nodelist=n1"]}
    replicas = {
        "chief": {"count": 1, "gpus": 0},
        "worker": {"count": 1, "gpus": 1},
        "ps": {"count": 1, "gpus": 0},
    }
    jobs = [
        server.submit(slurm=one_node, replicas=replicas, restart={"policy": "never"})
        for _ in range(2)
    ]
    running = [server.wait_for(j, "running", lambda job: job["status"] == "running") for j in jobs]
    assert server.job(jobs[0])["status"] == "running"  # both at once, on one node
    for job_id in jobs:
        server.wait_for(job_id, "succeeded", lambda job: job["status"] == "succeeded")
        wait_no_processes(job_id, server=server.url)
    tasks = [(t["host"], t["port"]) for job in running for t in job["tasks"]]
    assert {host for host, _ in tasks} == {f"{server.prefix}-{j}-n1" for j in jobs}, tasks
    ports = [port for _, port in tasks]
    assert len(ports) == len(set(ports)), tasks  # one machine: each port handed out once


def test_a_killed_worker_restarts_alone_inside_the_allocation(server: Server) -> None:
    job_id = server.submit(
        entrypoint=["python", "examples/digits.py", "--epochs", "12"],
        restart={"policy": "on_failure", "max_restarts": 3, "backoff_seconds": 0},
    )
    server.wait_for(job_id, "at epoch 3", lambda j: len(server.epochs(job_id)) >= 3)
    before = server.task(job_id, "worker:1")
    os.kill(before["pid"], signal.SIGKILL)
    done = server.wait_for(job_id, "succeeded", lambda j: j["status"] == "succeeded", 300)
    attempts = {t["name"]: t["attempt"] for t in done["tasks"]}
    assert attempts == {"chief:0": 0, "worker:0": 0, "worker:1": 1, "ps:0": 0}
    after = server.task(job_id, "worker:1")
    assert (after["host"], after["port"]) == (before["host"], before["port"])
    assert [epoch for epoch, _ in server.epochs(job_id)] == list(range(1, 13))
    assert len(server.named(job_id)) == 1  # still the one Slurm job
    wait_no_processes(job_id, server=server.url)


def test_scancel_from_outside_ends_the_job_saying_so(server: Server) -> None:
    job_id = server.submit(entrypoint=["python", "examples/digits.py", "--epochs", "50"])
    running = server.wait_for(job_id, "training", lambda j: len(server.epochs(job_id)) >= 1)
    slurm_id = running["slurm_job_id"]
    server.cluster.run("scancel", slurm_id)
    done = server.wait_for(job_id, "cancelled", lambda j: j["status"] == "cancelled", 60)
    assert done["reason"].startswith(f"Slurm job {slurm_id} was cancelled outside Strata")
    wait_no_processes(job_id, server=server.url)


def test_a_server_crash_while_the_slurm_job_runs_loses_nothing_and_submits_nothing_twice(
    server: Server,
) -> None:
    job_id = server.submit(entrypoint=["python", "examples/digits.py", "--epochs", "10"])
    running = server.wait_for(job_id, "at epoch 2", lambda j: len(server.epochs(job_id)) >= 2)
    server.crash()
    time.sleep(2)
    server.start()
    done = server.wait_for(job_id, "succeeded", lambda j: j["status"] == "succeeded", 300)
    assert done["slurm_job_id"] == running["slurm_job_id"]
    assert server.named(job_id) == [running["slurm_job_id"]]
    assert [epoch for epoch, _ in server.epochs(job_id)][-1] == 10
    assert {t["name"]: t["attempt"] for t in done["tasks"]} == {
        "chief:0": 0,
        "worker:0": 0,
        "worker:1": 0,
        "ps:0": 0,
    }
    wait_no_processes(job_id, server=server.url)


def test_a_requeued_slurm_job_resumes_from_the_checkpoint_taken_at_notice(server: Server) -> None:
    """The agents' notice under Slurm: scontrol requeue → a checkpoint for the interruption →
    pending → the next run resumes from that checkpoint, not from an older backup."""
    epochs = 60  # long enough that the requeue comes before the end
    job_id = server.submit(
        entrypoint=["python", "examples/digits.py", "--epochs", str(epochs)],
        restart={"policy": "on_failure", "max_restarts": 3, "backoff_seconds": 0},
        # Backups only at epoch ends: a checkpoint at notice is told apart by its trigger.
        checkpoint={"every_epochs": 1, "backup_every_seconds": 0},
    )
    running = server.wait_for(job_id, "at epoch 3", lambda j: len(server.epochs(job_id)) >= 3)
    slurm_id = running["slurm_job_id"]
    server.cluster.run("scontrol", "requeue", slurm_id)
    server.wait_for(job_id, "waiting for Slurm again", lambda j: j["status"] == "pending", 60)
    events = server.http.get(f"/jobs/{job_id}/events").json()
    notices = [e for e in events if e["data"].get("interruption") == "notice"]
    assert len(notices) == 1 and notices[0]["data"]["checkpoint"] is not None, [
        (e["message"], e["data"]) for e in events[-6:]
    ]
    step = notices[0]["data"]["step"]
    checkpoints = server.http.get(
        f"/jobs/{job_id}/checkpoints", params={"include_deleted": True}
    ).json()
    assert (step, "interruption") in [(c["step"], c["trigger"]) for c in checkpoints]
    # Slurm holds a requeued job back for two minutes; an administrator may let it go now.
    server.cluster.wait_state(slurm_id, "PENDING", timeout=60)
    server.cluster.run("scontrol", "update", f"JobId={slurm_id}", "StartTime=now")
    done = server.wait_for(job_id, "succeeded", lambda j: j["status"] == "succeeded", 300)
    chief = server.task(job_id, "chief:0")
    assert chief["attempt"] == 1  # one interruption, no other move
    after = server.epochs(job_id, 1)
    # The first epoch of the next run is the one the checkpoint's step lies in.
    assert after[0][0] == step // STEPS_PER_EPOCH + 1 and after[-1][0] == epochs, (step, after)
    assert (done["restart_count"], done["failure_count"]) == (0, 0)
    assert server.named(job_id) == [slurm_id]
    wait_no_processes(job_id, server=server.url)
