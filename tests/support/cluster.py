"""A real local cluster for end-to-end tests: `strata up`, extra agents, and process checks."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.postgres import free_port
from tests.support.processes import STRATA, stop, wait_healthy

REPO = Path(__file__).resolve().parents[2]
WARM_IDLE = re.compile(r"warm process \d+ (?:ready|taken) \((\d+) idle")


@dataclass
class Cluster:
    url: str
    admin_token: str
    agent_token: str
    data_dir: Path
    http: httpx.Client
    process: subprocess.Popen[bytes]
    extra_agents: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # The server URL its agents were given (tasks carry it as STRATA_SERVER): `url` unless
    # requests go to one server replica and agents through a load balancer.
    task_server: str = ""

    @property
    def tasks_reach(self) -> str:
        return self.task_server or self.url

    def stop_extra_agents(self) -> None:
        for extra in self.extra_agents:
            with contextlib.suppress(ProcessLookupError):
                extra.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                extra.wait(timeout=20)
            if extra.poll() is None:
                extra.kill()

    def agent_pids(self) -> list[int]:
        """The local agents `strata up` started (its child processes)."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in children.read_text().split()]

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post("/jobs", json=spec)
        assert response.status_code == 201, response.text
        job: dict[str, Any] = response.json()
        return job

    def job(self, job_id: int) -> dict[str, Any]:
        job: dict[str, Any] = self.http.get(f"/jobs/{job_id}").json()
        return job

    def events(self, job_id: int) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self.http.get(f"/jobs/{job_id}/events").json()
        return events

    def logs(self, job_id: int, task: str) -> list[str]:
        page = self.http.get(f"/jobs/{job_id}/tasks/{task}/logs", params={"limit": 10000}).json()
        lines: list[str] = page["lines"]
        return lines

    def wait_for(
        self, job_id: int, predicate: Callable[[dict[str, Any]], bool], timeout: float, what: str
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        job = self.job(job_id)
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if predicate(job):
                return job
            time.sleep(0.5)
        raise AssertionError(
            f"job {job_id} did not become {what} within {timeout}s: status={job['status']} "
            f"reason={job['reason']} tasks={[(t['name'], t['status']) for t in job['tasks']]}\n"
            f"events: {[e['message'] for e in self.events(job_id)]}"
        )

    def wait_status(self, job_id: int, status: str, timeout: float = 240) -> dict[str, Any]:
        return self.wait_for(job_id, lambda j: j["status"] == status, timeout, status)

    def start_agent(
        self,
        name: str,
        gpus: int,
        ports: str,
        state_dir: Path | None = None,
        address: str | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """An agent beside the cluster's; its identity is kept in `state_dir` (default:
        under the data dir, one per name); `address`: where its tasks are reached; `env` adds
        to its environment."""
        state_dir = state_dir or self.data_dir / "agent-state" / name
        log = (self.data_dir / f"agent-{name}.log").open("ab")
        process = subprocess.Popen(
            [
                *STRATA,
                "agent",
                "--server",
                self.url,
                "--name",
                name,
                "--gpus",
                str(gpus),
                "--port-range",
                ports,
                "--workspace",
                str(REPO),
                "--state-dir",
                str(state_dir),
                *(["--address", address] if address else []),
            ],
            env={**os.environ, "STRATA_AGENT_TOKEN": self.agent_token, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.extra_agents.append(process)
        return process

    def wait_host(self, name: str, status: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self.http.get("/hosts")
            assert answer.status_code == 200, answer.text
            hosts = {h["name"]: h for h in answer.json()}
            if name in hosts and hosts[name]["status"] == status:
                found: dict[str, Any] = hosts[name]
                return found
            time.sleep(0.2)
        raise AssertionError(f"host {name} not {status} within {timeout}s")


def job_processes(job_id: int, server: str) -> list[int]:
    """Pids of live processes started for a job of the cluster at `server`: the agent tags
    each with STRATA_JOB_ID and STRATA_SERVER (end-to-end files run side by side, and every
    cluster has a job 1)."""
    markers = [f"STRATA_JOB_ID={job_id}".encode(), f"STRATA_SERVER={server}".encode()]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            environ = (entry / "environ").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
            if all(m in environ for m in markers) and "State:\tZ" not in status:
                found.append(int(entry.name))
    return found


def wait_no_processes(job_id: int, *, server: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not job_processes(job_id, server):
            return
        time.sleep(0.3)
    left = job_processes(job_id, server)
    raise AssertionError(f"processes of job {job_id} still alive: {left}")


@contextlib.contextmanager
def local_cluster(
    data_dir: Path,
    agents: int = 2,
    gpus_per_agent: int = 2,
    database_url: str | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[Cluster]:
    """`strata up` with its own tokens and data dir on a free port (SQLite unless a database
    URL is given); `env` adds to the environment it and its agents start with."""
    port = free_port()
    admin, agent = "e2e-admin-token", "e2e-agent-token"
    environment = {
        **os.environ,
        "STRATA_API_TOKEN": admin,
        "STRATA_AGENT_TOKEN": agent,
        "STRATA_HEARTBEAT_TIMEOUT_SECONDS": "4",
        "STRATA_STOP_GRACE_SECONDS": "5",
        **(env or {}),
    }
    data_dir.mkdir(parents=True, exist_ok=True)
    log = (data_dir / "up.log").open("ab")
    process = subprocess.Popen(
        [
            *STRATA,
            "up",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            "--agents",
            str(agents),
            "--gpus-per-agent",
            str(gpus_per_agent),
            "--workspace",
            str(REPO),
            *(["--db", database_url] if database_url else []),
        ],
        env=environment,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    try:  # from here on, whatever fails, `strata up` is stopped
        cluster = Cluster(
            url=url,
            admin_token=admin,
            agent_token=agent,
            data_dir=data_dir,
            process=process,
            http=httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=30
            ),
        )
        try:
            wait_healthy(url, process)
            for index in range(agents):
                cluster.wait_host(f"local-{index}", "online")
            yield cluster
        finally:
            cluster.stop_extra_agents()
            cluster.http.close()
    finally:
        stop(process, grace=40)
        log.close()


class SplitCluster(Cluster):
    """`strata server` and `strata agent` as separate processes, so the server can die alone."""

    server_args: list[str]
    server_env: dict[str, str]

    def start_server(self) -> None:
        log = (self.data_dir / "server.log").open("ab")
        self.process = subprocess.Popen(
            self.server_args, env=self.server_env, stdout=log, stderr=subprocess.STDOUT
        )
        wait_healthy(self.url, self.process)

    def kill_server(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


@contextlib.contextmanager
def split_cluster(
    data_dir: Path, agents: int = 2, gpus_per_agent: int = 2
) -> Iterator[SplitCluster]:
    port = free_port()
    admin, agent = "split-admin-token", "split-agent-token"
    data_dir.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    cluster = SplitCluster(
        url=url,
        admin_token=admin,
        agent_token=agent,
        data_dir=data_dir,
        process=subprocess.Popen(["true"]),
        http=httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=30),
    )
    cluster.server_args = [*STRATA, "server"]
    cluster.server_env = {
        **os.environ,
        "STRATA_API_TOKEN": admin,
        "STRATA_AGENT_TOKEN": agent,
        "STRATA_DATA_DIR": str(data_dir),
        "STRATA_PORT": str(port),
        "STRATA_HEARTBEAT_TIMEOUT_SECONDS": "4",
        "STRATA_STOP_GRACE_SECONDS": "5",
    }
    try:
        cluster.start_server()
        for index in range(agents):
            cluster.start_agent(
                f"split-{index}", gpus_per_agent, f"{24000 + 100 * index}-{24099 + 100 * index}"
            )
        for index in range(agents):
            cluster.wait_host(f"split-{index}", "online")
        yield cluster
    finally:
        cluster.stop_extra_agents()
        stop(cluster.process)
        cluster.http.close()


def stream_frames(
    cluster: Cluster, job_id: int, *, stop: Callable[[dict[str, Any]], bool], timeout: float = 240
) -> list[dict[str, Any]]:
    """Frames of a job's stream, from history on, until `stop(frame)` says so (and 2 s more)."""
    from websockets.sync.client import connect

    url = (
        cluster.url.replace("http://", "ws://")
        + f"/jobs/{job_id}/stream?token={cluster.admin_token}"
    )
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    stop_at: float | None = None
    with connect(url, max_size=None) as websocket:
        websocket.send('{"type": "subscribe", "cursor": null}')
        while True:
            now = time.monotonic()
            end = deadline if stop_at is None else min(deadline, stop_at)
            if now >= end:
                break
            try:
                frame = json.loads(websocket.recv(timeout=end - now))
            except TimeoutError:
                break
            frame["received_at"] = time.time()
            frames.append(frame)
            if stop_at is None and stop(frame):
                stop_at = time.monotonic() + 2.0
    if stop_at is None:
        raise AssertionError(f"stream of job {job_id} did not reach its end within {timeout}s")
    return frames


def idle_warm_processes(cluster: Cluster, host: str) -> int:
    """How many warm processes the agent last said it had idle (0 before the first)."""
    log = (cluster.data_dir / f"agent-{host}.log").read_text(errors="replace")
    counts = WARM_IDLE.findall(log)
    return int(counts[-1]) if counts else 0


def wait_warm_idle(cluster: Cluster, host: str, at_least: int, timeout: float = 180) -> None:
    """Until the agent says it has this many warm processes idle (TensorFlow imported)."""
    deadline = time.monotonic() + timeout
    while idle_warm_processes(cluster, host) < at_least:
        assert time.monotonic() < deadline, f"{host} has no warm process idle"
        time.sleep(0.5)
