"""Warm starts on a real cluster: `strata up` whose agents keep warm processes (TensorFlow
already imported). A killed parameter-server worker comes back warm; `warm_start: false`
starts cold; a script sees the same sys.argv, __file__ and __name__ either way; no two
attempts share a process."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cluster import Cluster, local_cluster, wait_warm_idle

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
HOSTS = ("warm-0", "warm-1")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Two warm processes per agent, whatever the suite's default (see tests/conftest.py).
    previous = os.environ.get("STRATA_AGENT_WARM_POOL")
    os.environ["STRATA_AGENT_WARM_POOL"] = "2"
    try:
        # Agents of its own on ports of their own: `strata up` agents use fixed ranges, which
        # another cluster on this machine may hold.
        with local_cluster(tmp_path_factory.mktemp("warm") / "data", agents=0) as running:
            for index, host in enumerate(HOSTS):
                running.start_agent(host, 2, f"{26100 + 100 * index}-{26199 + 100 * index}")
            for host in HOSTS:
                running.wait_host(host, "online")
            yield running
    finally:
        if previous is None:
            del os.environ["STRATA_AGENT_WARM_POOL"]
        else:
            os.environ["STRATA_AGENT_WARM_POOL"] = previous


EPOCH = re.compile(r"epoch=(\d+) ")


def last_epoch(lines: list[str]) -> int:
    """The highest `epoch=N` the chief's log lines name (0 before the first)."""
    return max((int(m[1]) for line in lines if (m := EPOCH.search(line))), default=0)


def started_events(cluster: Cluster, job_id: int) -> list[dict[str, Any]]:
    return [e for e in cluster.events(job_id) if e["data"].get("to") == "running"]


def task(job: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(t for t in job["tasks"] if t["name"] == name)
    return found


def test_a_killed_ps_worker_comes_back_warm_in_a_process_of_its_own(cluster: Cluster) -> None:
    for host in HOSTS:
        wait_warm_idle(cluster, host, 2)
    spec: dict[str, Any] = yaml.safe_load((REPO / "examples" / "digits_ps.yaml").read_text())
    # Long enough to outlast the pool's refill, which waits while training keeps the CPUs busy
    # (up to 30 s): the job is cancelled at the end.
    spec["entrypoint"] = ["python", "examples/digits.py", "--epochs", "2000"]
    spec["restart"] = {"policy": "on_failure", "max_restarts": 3, "backoff_seconds": 0}
    job = cluster.submit(spec)
    cluster.wait_for(
        job["id"],
        lambda j: any("epoch=2 " in line for line in cluster.logs(j["id"], "chief:0")),
        240,
        "at epoch 2",
    )
    running = cluster.job(job["id"])
    worker = task(running, "worker:1")
    wait_warm_idle(cluster, worker["host"], 1)  # refilled after the first starts took theirs
    os.kill(worker["pid"], signal.SIGKILL)
    reached = last_epoch(cluster.logs(job["id"], "chief:0"))
    attempt = worker["attempt"] + 1
    cluster.wait_for(
        job["id"],
        lambda j: (
            task(j, "worker:1")["attempt"] == attempt and task(j, "worker:1")["status"] == "running"
        ),
        120,
        "running worker:1 again",
    )
    events = started_events(cluster, job["id"])
    again = [e for e in events if e["task"] == "worker:1" and e["data"]["attempt"] == attempt]
    assert len(again) == 1 and again[0]["data"]["warm"] is True, again
    assert again[0]["message"].startswith(f"worker:1 started warm on {worker['host']} (pid ")
    # The pool had a warm process for each first start, ps and workers (the runtime's
    # server) and the chief (the script) alike.
    first = [e for e in events if e["data"]["attempt"] == 0]
    assert len(first) == 4 and all(e["data"]["warm"] for e in first), first
    # Every start said how it started, and each attempt had a process of its own.
    assert all(isinstance(e["data"].get("warm"), bool) for e in events), events
    pids = [(e["data"]["host"], e["data"]["pid"]) for e in events]
    assert len(set(pids)) == len(pids) >= 5, pids
    # Training goes on with the warm worker: the chief gets past the epoch it was at.
    cluster.wait_for(
        job["id"],
        lambda j: last_epoch(cluster.logs(j["id"], "chief:0")) >= reached + 3,
        240,
        f"past epoch {reached + 3}",
    )
    cluster.http.post(f"/jobs/{job['id']}/cancel")
    cluster.wait_status(job["id"], "cancelled", timeout=60)


def script_job(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "strategy": "mirrored",
        "entrypoint": ["python", "./tests/e2e/../e2e/warm_script.py", "one", "--two"],
        "replicas": {"chief": {"count": 1, "gpus": 1}},
        "restart": {"policy": "never"},
        **extra,
    }


def shown(cluster: Cluster, job_id: int) -> dict[str, Any]:
    lines = [line for line in cluster.logs(job_id, "chief:0") if line.startswith("WARMCHECK ")]
    assert len(lines) == 1, cluster.logs(job_id, "chief:0")[-20:]
    seen: dict[str, Any] = json.loads(lines[0].removeprefix("WARMCHECK "))
    return seen


def test_a_script_sees_the_same_warm_as_cold_and_warm_start_false_is_cold(
    cluster: Cluster,
) -> None:
    for host in HOSTS:
        wait_warm_idle(cluster, host, 1)
    warm = cluster.submit(script_job("warm-script"))
    cold = cluster.submit(script_job("cold-script", warm_start=False))
    for job in (warm, cold):
        cluster.wait_status(job["id"], "succeeded", timeout=180)
    (warm_start,) = started_events(cluster, warm["id"])
    (cold_start,) = started_events(cluster, cold["id"])
    assert warm_start["data"]["warm"] is True, warm_start
    assert "started warm on" in warm_start["message"]
    assert cold_start["data"]["warm"] is False
    assert (
        "started cold (the job asks for cold starts (warm_start: false))" in (cold_start["message"])
    )
    warm_seen, cold_seen = shown(cluster, warm["id"]), shown(cluster, cold["id"])
    # The one GPU each was given (simulated: TensorFlow finds none on this host).
    assert warm_seen.pop("visible") != "" and cold_seen.pop("visible") != ""
    assert warm_seen == cold_seen
    assert warm_seen["argv"] == ["./tests/e2e/../e2e/warm_script.py", "one", "--two"]
    assert warm_seen["file"] == f"{REPO}/./tests/e2e/../e2e/warm_script.py"
    assert (warm_seen["name"], warm_seen["path0"]) == ("__main__", str(REPO / "tests" / "e2e"))
