"""Sweeps on a real cluster: the digits example searched by Optuna with ASHA, every trial a
real TensorFlow job on real agents, started in their warm processes.

* On `strata up`: examples/digits_sweep.yaml as it is (12 trials, 3 at a time, ASHA) ends
  with every trial succeeded or pruned, at least one pruned early, the best trial in the API,
  and every trial started warm.
* SIGKILL the server mid-sweep: once it is back, the sweep completes with exactly its trial
  budget, each trial one job, none started twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cluster import (
    Cluster,
    SplitCluster,
    local_cluster,
    split_cluster,
    wait_warm_idle,
)

# Twelve TensorFlow trials, three at a time, on two cores shared with other test files.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
HOSTS = ("sweep-0", "sweep-1")
ENDED = {"succeeded", "stopped", "failed"}


def example() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((REPO / "examples/digits_sweep.yaml").read_text())
    return spec


def create(cluster: Cluster, spec: dict[str, Any]) -> int:
    answer = cluster.http.post("/sweeps", json=spec)
    assert answer.status_code == 201, answer.text
    sweep_id: int = answer.json()["id"]
    return sweep_id


def sweep(cluster: Cluster, sweep_id: int) -> dict[str, Any]:
    found: dict[str, Any] = cluster.http.get(f"/sweeps/{sweep_id}").json()
    return found


def wait_sweep(cluster: Cluster, sweep_id: int, timeout: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    found = sweep(cluster, sweep_id)
    while found["status"] not in ENDED:
        assert time.monotonic() < deadline, f"sweep {sweep_id} did not end: {summary(found)}"
        time.sleep(1)
        found = sweep(cluster, sweep_id)
    return found


def summary(found: dict[str, Any]) -> str:
    trials = [(t["number"], t["status"], t["job_status"], t["reason"]) for t in found["trials"]]
    return f"status={found['status']} reason={found['reason']} trials={trials}"


def chief_starts(cluster: Cluster, job_id: int) -> list[dict[str, Any]]:
    """The events that record the job's chief starting (warm or cold, as its agent said)."""
    return [
        e
        for e in cluster.events(job_id)
        if e.get("task") == "chief:0" and isinstance(e["data"].get("warm"), bool)
    ]


@pytest.fixture(scope="module")
def warm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """`strata up` with two agents of its own, each with six warm processes ready before the
    sweep starts: on two cores shared with other test files a pool refills slower than trials
    end (each refill waits for a free CPU, then imports TensorFlow), so the pools hold about
    what the sweep takes."""
    previous = os.environ.get("STRATA_AGENT_WARM_POOL")
    os.environ["STRATA_AGENT_WARM_POOL"] = "6"
    try:
        with local_cluster(tmp_path_factory.mktemp("sweeps") / "data", agents=0) as running:
            for index, host in enumerate(HOSTS):
                running.start_agent(host, 2, f"{26500 + 100 * index}-{26599 + 100 * index}")
            for host in HOSTS:
                running.wait_host(host, "online")
            for host in HOSTS:
                wait_warm_idle(running, host, 6, timeout=400)
            yield running
    finally:
        if previous is None:
            del os.environ["STRATA_AGENT_WARM_POOL"]
        else:
            os.environ["STRATA_AGENT_WARM_POOL"] = previous


def test_an_asha_sweep_of_the_digits_example_prunes_and_finds_the_best(
    warm_cluster: Cluster,
) -> None:
    cluster = warm_cluster
    spec = example()
    assert spec["budget"] == {"trials": 12, "parallel": 3, "max_failed": 3}
    assert spec["early_stopping"]["type"] == "asha"
    sweep_id = create(cluster, spec)
    running_at_once = 0
    deadline = time.monotonic() + 900
    found = sweep(cluster, sweep_id)
    while found["status"] not in ENDED:
        assert time.monotonic() < deadline, summary(found)
        running_at_once = max(running_at_once, found["counts"]["running"])
        time.sleep(0.5)
        found = sweep(cluster, sweep_id)
    assert found["status"] == "succeeded", summary(found)
    trials = found["trials"]
    assert [t["number"] for t in trials] == list(range(12)), summary(found)
    assert {t["status"] for t in trials} <= {"succeeded", "pruned"}, summary(found)
    assert running_at_once <= 3
    pruned = [t for t in trials if t["status"] == "pruned"]
    assert pruned, summary(found)
    for trial in pruned:
        # Stopped early: before its last epoch, at a rung, with its job cancelled so.
        reached = int(trial["curve"][-1][0])
        assert reached < 9, trial
        assert trial["reason"].startswith(f"pruned at epoch {reached}: ASHA rung "), trial
        assert trial["job_status"] == "cancelled"
        assert cluster.job(trial["job_id"])["reason"] == trial["reason"]
    for trial in trials:
        if trial["status"] == "succeeded":
            assert [int(r) for r, _ in trial["curve"]] == list(range(1, 10)), trial
            assert trial["value"] == trial["curve"][-1][1]
    # The best: the succeeded trial with the lowest val_loss, with its parameters.
    best = min((t for t in trials if t["status"] == "succeeded"), key=lambda t: t["value"])
    assert found["best"]["number"] == best["number"]
    assert found["best"]["value"] == best["value"]
    assert set(found["best"]["params"]) == {"lr", "units"}
    assert found["reason"].startswith(f"best: trial {best['number']}, val_loss ")
    job = cluster.job(best["job_id"])
    assert "--learning-rate" in job["spec"]["entrypoint"]
    assert job["spec"]["entrypoint"][-3] == repr(best["params"]["lr"])
    assert job["spec"]["entrypoint"][-1] == str(best["params"]["units"])
    # Trials start in warm processes, as their start events say. Placement does not know the
    # pools, so one agent may take more trials than its pool held before it refilled (a refill
    # waits for a free CPU, then imports TensorFlow): such a trial starts cold, but only for
    # that reason, never for its spec.
    starts = {t["number"]: chief_starts(cluster, t["job_id"]) for t in trials}
    assert all(len(events) == 1 for events in starts.values()), starts
    warm = [n for n, events in starts.items() if events[0]["data"]["warm"] is True]
    for number, events in starts.items():
        message = events[0]["message"]
        if number in warm:
            assert " started warm on " in message, message
        else:
            assert "started cold (no warm process was ready)" in message, message
    assert len(warm) >= 8, starts
    tagged = cluster.http.get("/jobs", params={"tag": f"sweep-{sweep_id}", "limit": 100}).json()
    assert sorted(j["id"] for j in tagged["items"]) == sorted(t["job_id"] for t in trials)


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[SplitCluster]:
    with split_cluster(tmp_path / "data", agents=1) as running:
        yield running


def test_a_sweep_outlives_a_server_sigkill_with_exactly_its_budget(
    restartable: SplitCluster,
) -> None:
    cluster = restartable
    spec = example()
    spec["name"] = "digits-restart"
    spec["budget"] = {"trials": 5, "parallel": 2}
    spec["job"]["entrypoint"][3] = "4"  # --epochs
    sweep_id = create(cluster, spec)
    # Mid-sweep: trials have started, and some are still to be asked for.
    deadline = time.monotonic() + 300
    found = sweep(cluster, sweep_id)
    while not (found["counts"]["running"] and len(found["trials"]) < 5):
        assert time.monotonic() < deadline and found["status"] == "running", summary(found)
        time.sleep(0.3)
        found = sweep(cluster, sweep_id)
    while not any(t["job_status"] == "running" for t in found["trials"]):
        assert time.monotonic() < deadline, summary(found)
        time.sleep(0.3)
        found = sweep(cluster, sweep_id)
    cluster.kill_server()
    cluster.start_server()
    found = wait_sweep(cluster, sweep_id)
    assert found["status"] == "succeeded", summary(found)
    trials = found["trials"]
    assert [t["number"] for t in trials] == list(range(5)), summary(found)
    assert {t["status"] for t in trials} <= {"succeeded", "pruned"}, summary(found)
    assert len({t["job_id"] for t in trials}) == 5
    tagged = cluster.http.get("/jobs", params={"tag": f"sweep-{sweep_id}", "limit": 100}).json()
    assert sorted(j["id"] for j in tagged["items"]) == sorted(t["job_id"] for t in trials)
    for trial in trials:
        # Each trial's chief started once: none was run twice, none restarted by the restart.
        job = cluster.job(trial["job_id"])
        chief = next(t for t in job["tasks"] if t["name"] == "chief:0")
        assert chief["attempt"] == 0, (trial["number"], job["status"], job["reason"])
        assert len(chief_starts(cluster, trial["job_id"])) == 1
