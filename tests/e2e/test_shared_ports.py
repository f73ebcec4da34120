"""Two agents on one machine with the same port range run two jobs at once, both to the end.

The server picks the lowest free port per host record; two agents on one machine (two Slurm
jobs sharing a node, or agents started by hand) are two records. Each agent claims its own block
of the range machine-wide, so the parameter-server jobs' servers never try to bind a port the
other agent's task holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.support.cluster import REPO, Cluster, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

# Both agents are given it whole; no other test's agents use it.
SHARED_RANGE = "24700-24799"
TWINS = ("twin-a", "twin-b")
FINAL = ("succeeded", "failed", "cancelled")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("shared-ports") / "data", agents=0) as running:
        for name in TWINS:
            running.start_agent(name, gpus=1, ports=SHARED_RANGE)
        for name in TWINS:
            running.wait_host(name, "online")
        yield running


def ps_job(name: str) -> dict[str, Any]:
    """A chief, one worker with a GPU, one ps: every task serves gRPC on its port."""
    spec: dict[str, Any] = yaml.safe_load((REPO / "examples" / "digits_ps.yaml").read_text())
    spec["name"] = name
    spec["entrypoint"] = [*spec["entrypoint"][:2], "--epochs", "2", *spec["entrypoint"][4:]]
    spec["replicas"]["worker"]["count"] = 1
    spec["restart"] = {"policy": "never"}  # a port clash fails the job rather than retrying
    return spec


def test_two_agents_with_one_port_range_run_two_jobs_at_once(cluster: Cluster) -> None:
    jobs = [cluster.submit(ps_job(f"shared-ports-{i}"))["id"] for i in range(2)]
    # Both placed at once: the two workers take the two agents' one GPU each.
    placed = [
        cluster.wait_for(j, lambda job: all(t["port"] for t in job["tasks"]), 120, "placed")
        for j in jobs
    ]
    ended = [cluster.wait_for(j, lambda job: job["status"] in FINAL, 300, "finished") for j in jobs]
    for job in ended:
        events = [e["message"] for e in cluster.events(job["id"])]
        assert job["status"] == "succeeded", (job["reason"], events)

    tasks = [(t["host"], t["port"]) for job in placed for t in job["tasks"]]
    assert {host for host, _ in tasks} == set(TWINS), tasks
    # One machine: a port is handed out once, whichever agent handed it out.
    ports = [port for _, port in tasks]
    assert len(ports) == len(set(ports)), tasks
    hosts = {h["name"]: h for h in cluster.http.get("/hosts").json()}
    blocks = [range(hosts[n]["port_range"][0], hosts[n]["port_range"][1] + 1) for n in TWINS]
    assert not set(blocks[0]) & set(blocks[1]), blocks  # each agent advertises its own block
    for job_id in jobs:
        wait_no_processes(job_id, server=cluster.url)
