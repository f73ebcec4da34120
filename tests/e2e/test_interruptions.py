"""Interruptions on real TensorFlow processes (`strata up`, agents of two simulated GPUs):
suspend and resume, a preemption by a job of higher priority, and an agent's notice that it
is leaving. Each time the checkpoint writer backs up and checkpoints at its next step and
holds; the job goes on elsewhere or later at the next step, with no restart counted."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_checkpoints import EXAMPLES, ps_spec
from tests.support.cluster import Cluster, local_cluster, wait_no_processes

pytestmark = pytest.mark.e2e

STEPS_PER_EPOCH = 20  # the digits example's default
# Runs until the file named by its argument exists, then succeeds.
UNTIL = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.2)\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("interruptions") / "data") as running:
        yield running


def past_third_epoch(cluster: Cluster, job_id: int, lead: str) -> None:
    cluster.wait_for(
        job_id,
        lambda _: any(line.startswith("epoch=3 ") for line in cluster.logs(job_id, lead)),
        180,
        "past its third epoch",
    )


def preempt(
    cluster: Cluster, low: int, name: str, release: Path, reason: str | None = None
) -> dict[str, Any]:
    """A 2-GPU job of priority 10 preempts `low`, runs and ends; the preemption's event."""
    high = cluster.submit(two_gpu_job("default", release) | {"name": name, "priority": 10})["id"]
    try:
        cluster.wait_status(high, "running", timeout=180)
        preempted = cluster.job(low)
        assert preempted["status"] == "pending"
        assert reason is None or preempted["reason"] == reason
        interruptions = [e for e in cluster.events(low) if e["data"].get("interruption")]
        event: dict[str, Any] = interruptions[-1]
        assert event["message"].startswith(f"preempted by job {high} ({name}, priority 10)")
        assert event["data"]["by"] == high
    finally:
        release.touch()
    cluster.wait_status(high, "succeeded", timeout=60)
    return event


def assert_mwm_resumed_where_it_stopped(cluster: Cluster, job_id: int, epochs: int) -> None:
    """The interrupted MWM job ends with nothing counted against it, its workers' first
    attempt's last epoch line where the resumed one's first is (or one before)."""
    first = cluster.http.get(
        f"/jobs/{job_id}/tasks/worker:0/logs", params={"attempt": 0, "limit": 10000}
    ).json()["lines"]
    stopped_at = [line for line in first if line.startswith("epoch=")]
    done = cluster.wait_status(job_id, "succeeded", timeout=300)
    assert (done["restart_count"], done["failure_count"]) == (0, 0)
    resumed = [line for line in cluster.logs(job_id, "worker:0") if line.startswith("epoch=")]
    # Not from the last backup (the start, at most every hour) but from the step it stopped at.
    last = int(stopped_at[-1].split()[0].removeprefix("epoch="))
    assert resumed[0].startswith((f"epoch={last} ", f"epoch={last + 1} ")), (stopped_at, resumed)
    checkpoints = cluster.http.get(f"/jobs/{job_id}/checkpoints", params={"include_deleted": True})
    steps = [c["step"] for c in checkpoints.json() if c["trigger"] != "export"]
    assert max(steps) == epochs * STEPS_PER_EPOCH  # none lost, none run twice
    wait_no_processes(job_id, server=cluster.url)


def two_gpu_job(project: str, release: Path) -> dict[str, Any]:
    return {
        "name": "takes-the-gpus",
        "project": project,
        "strategy": "mirrored",
        "entrypoint": ["python", "-c", UNTIL, str(release)],
        "replicas": {"chief": {"count": 1, "gpus": 2}},
        "restart": {"policy": "never"},
    }


def test_a_suspended_ps_job_frees_its_gpus_and_quota_and_resumes_at_the_next_step(
    cluster: Cluster, tmp_path: Path
) -> None:
    assert cluster.http.post("/projects", json={"name": "lab"}).status_code == 201
    quota = cluster.http.put("/projects/lab/quota", json={"max_gpus": 2})
    assert quota.status_code == 200, quota.text
    epochs = 40
    spec = ps_spec("suspended-ps", epochs, project="lab", checkpoint={"every_epochs": 10})
    job_id = cluster.submit(spec)["id"]
    past_third_epoch(cluster, job_id, "chief:0")

    answer = cluster.http.post(f"/jobs/{job_id}/suspend", timeout=120)
    assert answer.status_code == 200, answer.text
    suspended = answer.json()
    assert suspended["status"] == "suspended"
    assert suspended["reason"].startswith("suspended by request; resumes from checkpoint ckpt-")
    event = [e for e in cluster.events(job_id) if e["to_status"] == "suspended"][-1]
    step = event["data"]["step"]
    assert step >= 3 * STEPS_PER_EPOCH
    assert event["data"]["steps_lost"] == 0  # its chief held training after the save
    wait_no_processes(job_id, server=cluster.url)
    totals = cluster.http.get("/cluster").json()["totals"]
    assert totals["free_gpus"] == totals["gpus"]

    # The project's 2-GPU quota is free for another job while this one is suspended.
    release = tmp_path / "release"
    other = cluster.submit(two_gpu_job("lab", release))["id"]
    try:
        cluster.wait_status(other, "running", timeout=120)
    finally:
        release.touch()
    cluster.wait_status(other, "succeeded", timeout=60)

    resumed = cluster.http.post(f"/jobs/{job_id}/resume")
    assert resumed.status_code == 200, resumed.text
    done = cluster.wait_status(job_id, "succeeded", timeout=300)
    assert (done["restart_count"], done["failure_count"]) == (0, 0)
    checkpoints = cluster.http.get(
        f"/jobs/{job_id}/checkpoints", params={"include_deleted": True}
    ).json()
    (interruption,) = [c for c in checkpoints if c["trigger"] == "interruption"]
    assert interruption["step"] == step
    # Not one step run twice nor skipped: the optimizer ends at exactly epochs x steps.
    assert max(c["step"] for c in checkpoints if c["trigger"] != "export") == (
        epochs * STEPS_PER_EPOCH
    )
    # The resumed chief began in the epoch it was suspended in.
    lines = [line for line in cluster.logs(job_id, "chief:0") if line.startswith("epoch=")]
    assert lines[0].startswith(f"epoch={step // STEPS_PER_EPOCH + 1} "), lines[:3]
    wait_no_processes(job_id, server=cluster.url)


def test_a_higher_priority_job_preempts_a_ps_job_which_resumes_from_the_checkpoint_then(
    cluster: Cluster, tmp_path: Path
) -> None:
    epochs = 40
    spec = ps_spec("preempted-ps", epochs, checkpoint={"every_epochs": 10})
    spec["replicas"]["worker"]["gpus"] = 2  # both workers: all four GPUs of the cluster
    low = cluster.submit(spec)["id"]
    past_third_epoch(cluster, low, "chief:0")

    full = "needs 4 GPUs on free hosts, cluster has 2 free"
    event = preempt(cluster, low, "urgent", tmp_path / "release", reason=full)
    assert event["data"]["steps_lost"] == 0
    step = event["data"]["step"]
    assert step >= 3 * STEPS_PER_EPOCH

    done = cluster.wait_status(low, "succeeded", timeout=300)
    assert (done["restart_count"], done["failure_count"]) == (0, 0)
    checkpoints = cluster.http.get(f"/jobs/{low}/checkpoints", params={"include_deleted": True})
    steps = [c["step"] for c in checkpoints.json() if c["trigger"] not in ("export",)]
    assert step in steps
    assert max(steps) == epochs * STEPS_PER_EPOCH  # no step lost, none run twice
    wait_no_processes(low, server=cluster.url)


@pytest.fixture(scope="module")
def one_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # A notice long enough for a checkpoint on a loaded machine; it ends when the tasks do.
    notice = {"STRATA_AGENT_NOTICE": "60"}
    with local_cluster(tmp_path_factory.mktemp("notice") / "data", agents=1, env=notice) as running:
        try:
            yield running
        finally:
            running.stop_extra_agents()


def test_an_agent_told_to_stop_gives_notice_and_its_job_moves_with_nothing_lost(
    one_agent: Cluster,
) -> None:
    cluster = one_agent
    epochs = 40
    # The spare is up before the job starts, drained so that the job goes to local-0.
    cluster.start_agent("spare", gpus=2, ports="23000-23099")
    cluster.wait_host("spare", "online")
    assert cluster.http.post("/hosts/spare/drain").status_code == 200
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / "digits_mirrored.yaml").read_text())
    spec["name"] = "moved-by-notice"
    spec["entrypoint"] = ["python", "examples/digits.py", "--epochs", str(epochs)]
    spec["checkpoint"] = {"every_epochs": 10}
    job_id = cluster.submit(spec)["id"]
    past_third_epoch(cluster, job_id, "chief:0")
    assert cluster.http.delete("/hosts/spare/drain").status_code == 200
    (leaving,) = cluster.agent_pids()  # local-0, where the job runs
    os.kill(leaving, signal.SIGTERM)

    moved = cluster.wait_for(
        job_id,
        lambda j: j["status"] == "running" and j["tasks"][0]["host"] == "spare",
        120,
        "running again on the spare host",
    )
    assert (moved["restart_count"], moved["failure_count"]) == (0, 0)
    event = [e for e in cluster.events(job_id) if e["data"].get("interruption")][-1]
    assert event["message"].startswith("local-0 is leaving (its agent was told to stop)")
    assert (event["data"]["host"], event["data"]["steps_lost"]) == ("local-0", 0), event
    step = event["data"]["step"]
    assert step >= 3 * STEPS_PER_EPOCH

    done = cluster.wait_status(job_id, "succeeded", timeout=300)
    assert (done["restart_count"], done["failure_count"]) == (0, 0)
    checkpoints = cluster.http.get(f"/jobs/{job_id}/checkpoints", params={"include_deleted": True})
    steps = [c["step"] for c in checkpoints.json() if c["trigger"] != "export"]
    assert step in steps and max(steps) == epochs * STEPS_PER_EPOCH
    wait_no_processes(job_id, server=cluster.url)


@pytest.fixture(scope="module")
def gpu_and_cpu_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """local-0 with two GPUs, and cpu-0 with none: a PS job's workers go to the first, its
    chief and ps to the second."""
    with local_cluster(tmp_path_factory.mktemp("drain") / "data", agents=1) as running:
        try:
            running.start_agent("cpu-0", gpus=0, ports="23100-23199")
            running.wait_host("cpu-0", "online")
            yield running
        finally:
            running.stop_extra_agents()


def placed(job: dict[str, Any]) -> dict[str, tuple[str | None, int]]:
    return {t["name"]: (t["host"], t["attempt"]) for t in job["tasks"]}


def test_a_drained_host_s_workers_move_and_the_ps_serves_on(gpu_and_cpu_hosts: Cluster) -> None:
    cluster = gpu_and_cpu_hosts
    epochs = 40
    # The spare is up before the job starts, drained so that the workers go to local-0.
    cluster.start_agent("spare", gpus=2, ports="23200-23299")
    cluster.wait_host("spare", "online")
    assert cluster.http.post("/hosts/spare/drain").status_code == 200
    job_id = cluster.submit(ps_spec("drained-workers", epochs, checkpoint={"every_epochs": 10}))[
        "id"
    ]
    running = cluster.wait_for(
        job_id,
        lambda _: any(line.startswith("epoch=3 ") for line in cluster.logs(job_id, "chief:0")),
        180,
        "past its third epoch",
    )
    assert placed(running) == {
        "chief:0": ("cpu-0", 0),
        "ps:0": ("cpu-0", 0),
        "worker:0": ("local-0", 0),
        "worker:1": ("local-0", 0),
    }
    ps_pid = next(t["pid"] for t in running["tasks"] if t["name"] == "ps:0")
    assert cluster.http.delete("/hosts/spare/drain").status_code == 200

    drained = cluster.http.post("/hosts/local-0/drain", params={"deadline_seconds": 120})
    assert drained.status_code == 200, drained.text
    assert drained.json()["draining_since"] is not None
    moved = cluster.wait_for(
        job_id,
        lambda j: j["status"] == "running" and placed(j)["worker:0"][0] == "spare",
        120,
        "running again with its workers on the spare host",
    )
    assert placed(moved)["ps:0"] == ("cpu-0", 0)  # the ps was not restarted
    assert next(t["pid"] for t in moved["tasks"] if t["name"] == "ps:0") == ps_pid
    assert placed(moved)["chief:0"][1] == 1  # restarted to reach its workers' new addresses
    assert (moved["restart_count"], moved["failure_count"]) == (0, 0)
    event = [e for e in cluster.events(job_id) if e["data"].get("interruption")][-1]
    assert event["message"].startswith("local-0 is being drained; resumes from checkpoint ")
    assert event["data"]["moved"] == ["chief:0", "worker:0", "worker:1"]
    step = event["data"]["step"]

    def local_0() -> dict[str, Any]:
        found: dict[str, Any] = next(
            h for h in cluster.http.get("/hosts").json() if h["name"] == "local-0"
        )
        return found

    # Drained once nothing of it is left there; it takes no new task until undrained.
    cluster.wait_for(job_id, lambda _: local_0()["live_tasks"] == 0, 30, "local-0 drained")
    release = cluster.data_dir / "release-after-drain"
    waiting = cluster.submit(
        {
            "name": "only-fits-on-local-0",
            "strategy": "mirrored",
            "entrypoint": ["python", "-c", UNTIL, str(release)],
            "replicas": {"chief": {"count": 1, "gpus": 2}},
            "restart": {"policy": "never"},
        }
    )["id"]
    try:
        assert cluster.job(waiting)["status"] == "pending"
        assert cluster.http.delete("/hosts/local-0/drain").json()["draining_since"] is None
        assert cluster.wait_status(waiting, "running", timeout=60)["tasks"][0]["host"] == "local-0"
    finally:
        release.touch()
    cluster.wait_status(waiting, "succeeded", timeout=60)

    done = cluster.wait_status(job_id, "succeeded", timeout=300)
    assert (done["restart_count"], done["failure_count"]) == (0, 0)
    checkpoints = cluster.http.get(f"/jobs/{job_id}/checkpoints", params={"include_deleted": True})
    steps = [c["step"] for c in checkpoints.json() if c["trigger"] != "export"]
    assert step in steps and max(steps) == epochs * STEPS_PER_EPOCH  # no epoch lost
    wait_no_processes(job_id, server=cluster.url)


def test_a_suspended_mwm_job_resumes_at_the_step_its_workers_saved_as_they_stopped(
    cluster: Cluster,
) -> None:
    epochs = 40
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / "digits_mwm.yaml").read_text())
    spec["name"] = "suspended-mwm"
    spec["entrypoint"] = ["python", "examples/digits.py", "--epochs", str(epochs)]
    spec["checkpoint"] = {"every_epochs": 10, "backup_every_seconds": 3600}  # few backups
    job_id = cluster.submit(spec)["id"]
    past_third_epoch(cluster, job_id, "worker:0")
    answer = cluster.http.post(f"/jobs/{job_id}/suspend", timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["reason"] == (
        "suspended by request; resumes from the backup its workers write together as they stop"
    )
    wait_no_processes(job_id, server=cluster.url)
    assert cluster.http.post(f"/jobs/{job_id}/resume").status_code == 200
    assert_mwm_resumed_where_it_stopped(cluster, job_id, epochs)


def test_a_higher_priority_job_preempts_an_mwm_job_which_resumes_at_the_step_it_saved(
    cluster: Cluster, tmp_path: Path
) -> None:
    epochs = 40
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / "digits_mwm.yaml").read_text())
    spec["name"] = "preempted-mwm"
    spec["entrypoint"] = ["python", "examples/digits.py", "--epochs", str(epochs)]
    spec["replicas"]["worker"]["gpus"] = 2  # both workers: all four GPUs of the cluster
    spec["checkpoint"] = {"every_epochs": 10, "backup_every_seconds": 3600}  # few backups
    low = cluster.submit(spec)["id"]
    past_third_epoch(cluster, low, "worker:0")

    preempt(cluster, low, "urgent-over-mwm", tmp_path / "release")
    assert_mwm_resumed_where_it_stopped(cluster, low, epochs)


def test_an_mwm_worker_stopped_from_outside_saves_with_the_others_and_the_job_resumes_there(
    cluster: Cluster,
) -> None:
    epochs = 40
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / "digits_mwm.yaml").read_text())
    spec["name"] = "sigterm-from-outside"
    spec["entrypoint"] = ["python", "examples/digits.py", "--epochs", str(epochs)]
    spec["checkpoint"] = {"every_epochs": 10, "backup_every_seconds": 3600}  # few backups
    spec["restart"] = {"policy": "never"}  # an interruption is no failure: it resumes anyway
    job_id = cluster.submit(spec)["id"]
    past_third_epoch(cluster, job_id, "worker:0")
    worker = next(t for t in cluster.job(job_id)["tasks"] if t["name"] == "worker:1")
    os.kill(worker["pid"], signal.SIGTERM)  # as a host's own tooling or an operator might

    cluster.wait_for(
        job_id,
        lambda _: any(
            e["data"].get("interruption") == "stop_signal" for e in cluster.events(job_id)
        ),
        120,
        "interrupted by the stop signal",
    )
    assert_mwm_resumed_where_it_stopped(cluster, job_id, epochs)
