"""Several servers: how soon another replica leads and places work after the leader dies, and
what a second replica costs a `GET /jobs` at 1,000 agents.

    .venv/bin/python -m bench.replicas [--runs 5] [--agents 1000] [--quick]

Failover: three `strata server` replicas on a throwaway PostgreSQL cluster behind HAProxy
(Debian's package), one real `strata agent`, the default lease (STRATA_LEADER_LEASE_SECONDS)
and heartbeat timeout. Each run SIGKILLs the leader and at once submits a one-task job through
the load balancer (a follower holds the request until a replica leads), then times: kill → a
replica says it leads (its /healthz, polled every 20 ms), kill → the submission acknowledged,
kill → the job placed by the new leader (`scheduled`), and kill → the job running (its agent,
cut off from the dead leader, reconnected and started it), polled every 20 ms. The killed
replica is started again, as a follower, before the next run.

Requests: the same 1,000 simulated agents (bench.scale's, real websockets) and the same jobs
against one replica, and against two behind HAProxy (agents and requests through it, so half
of them reach the follower, which forwards to the leader), in the same run: `GET /jobs`
latency over 300 requests with every agent heartbeating.
Results go to bench/results/replicas.json; bench.report renders them.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx

from bench.harness import (
    machine_info,
    measured_on,
    percentile,
    postgres_cluster,
    postgres_database,
    spread,
    strata_server,
    write_result,
)
from bench.scale import AGENT_PROCESSES, agents_process, wait_online
from tests.support.factories import sleeper_spec
from tests.support.replicas import ReplicaSet, replica_set

DEFAULTS = {"STRATA_LEADER_LEASE_SECONDS": "4", "STRATA_HEARTBEAT_TIMEOUT_SECONDS": "6"}
POLL_SECONDS = 0.02


def _until(what: str, check: Any, timeout: float = 60) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if check():
            return time.monotonic()
        time.sleep(POLL_SECONDS)
    raise TimeoutError(f"{what} not within {timeout} s")


def failover_run(cluster: ReplicaSet) -> dict[str, float]:
    old = cluster.wait_leader()
    others = [r for r in cluster.replicas if r is not old]
    led: list[float] = []

    def watch() -> None:
        with contextlib.suppress(TimeoutError):
            led.append(
                _until(
                    "a new leader",
                    lambda: any((r.health() or {}).get("role") == "leader" for r in others),
                )
            )

    watcher = threading.Thread(target=watch)
    old.kill()
    killed = time.monotonic()
    watcher.start()
    answer = cluster.http.post("/jobs", json=sleeper_spec("failover-probe"))
    acknowledged = time.monotonic()
    answer.raise_for_status()
    job_id = answer.json()["id"]
    placed = _until("the job placed", lambda: cluster.job(job_id)["status"] != "pending")
    running = _until("the job running", lambda: cluster.job(job_id)["status"] == "running")
    watcher.join()
    cluster.http.post(f"/jobs/{job_id}/cancel")
    cluster.restore()
    cluster.wait_leader()
    time.sleep(2)
    return {
        "led_seconds": led[0] - killed,
        "acknowledged_seconds": acknowledged - killed,
        "placed_seconds": placed - killed,
        "running_seconds": running - killed,
    }


def failover(admin_url: str, runs: int) -> dict[str, Any]:
    with (
        postgres_database(admin_url) as url,
        TemporaryDirectory(prefix="strata-bench-replicas-") as directory,
        replica_set(Path(directory), url, replicas=3, agents=1, env=DEFAULTS) as cluster,
    ):
        measured = [failover_run(cluster) for _ in range(runs)]
    return {
        "runs": measured,
        **{key: spread([run[key] for run in measured]) for key in measured[0]},
    }


@contextlib.contextmanager
def simulated_agents(ws_url: str, token: str, count: int) -> Iterator[None]:
    context = multiprocessing.get_context("spawn")
    controls, processes = [], []
    for part in range(AGENT_PROCESSES):
        parent, child = context.Pipe()
        indices = list(range(part, count, AGENT_PROCESSES))
        process = context.Process(target=agents_process, args=(ws_url, token, indices, child))
        process.start()
        controls.append(parent)
        processes.append(process)
    try:
        yield
    finally:
        for control in controls:
            control.send("stop")
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()


def jobs_latency(http: httpx.Client, requests: int) -> dict[str, float]:
    times = []
    for _ in range(requests):
        began = time.perf_counter()
        http.get("/jobs").raise_for_status()
        times.append(time.perf_counter() - began)
    ordered = sorted(times)
    return {"p50_ms": percentile(ordered, 50) * 1000, "p99_ms": percentile(ordered, 99) * 1000}


def with_agents(url: str, token: str, admin: str, agents: int, requests: int) -> dict[str, float]:
    ws_url = "ws" + url.removeprefix("http") + "/agents/connect"
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=60)
    with simulated_agents(ws_url, token, agents):
        wait_online(http, agents, timeout=300)
        for _ in range(50):  # a page of running jobs to list
            http.post("/jobs", json=sleeper_spec("failover-probe")).raise_for_status()
        time.sleep(10)  # their starts confirmed; only heartbeats from here
        return jobs_latency(http, requests)


def requests_side_by_side(admin_url: str, agents: int, requests: int) -> dict[str, Any]:
    with postgres_database(admin_url) as url, strata_server(url, DEFAULTS) as one:
        single = with_agents(one.url, one.agent_token, one.admin_token, agents, requests)
    with (
        postgres_database(admin_url) as url,
        TemporaryDirectory(prefix="strata-bench-replicas-") as directory,
        replica_set(Path(directory), url, replicas=2, agents=0, env=DEFAULTS) as cluster,
    ):
        double = with_agents(
            cluster.url, cluster.agent_token, cluster.admin_token, agents, requests
        )
    return {"agents": agents, "requests": requests, "one_replica": single, "two_replicas": double}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="3 runs, 200 agents")
    args = parser.parse_args(argv)
    runs, agents = (3, 200) if args.quick else (args.runs, args.agents)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    with postgres_cluster() as admin_url:
        result = {
            **measured_on(),
            "machine": machine_info(admin_url),
            "failover": failover(admin_url, runs),
            "requests": requests_side_by_side(admin_url, agents, 300),
        }
    print(write_result("replicas", result))
    from bench.report import write

    print(write())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
