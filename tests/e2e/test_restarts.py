"""Role-aware fault tolerance on real processes: restarts by policy, by request, after host loss."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cluster import Cluster, job_processes, local_cluster, wait_no_processes
from tests.support.processes import STRATA

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EPOCH_LINE = re.compile(r"^epoch=(\d+) loss=([0-9.]+)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("restarts") / "data") as running:
        yield running


def python_job(name: str, code: str, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "strategy": "mirrored",
        "entrypoint": ["python", "-c", code],
        "replicas": {"chief": {"count": 1}},
    }
    spec.update(extra)
    return spec


def pid_of(cluster: Cluster, job_id: int, task: str) -> int:
    found = next(t for t in cluster.job(job_id)["tasks"] if t["name"] == task)
    return int(found["pid"])


def test_a_killed_ps_worker_is_restarted_alone_and_training_goes_on(cluster: Cluster) -> None:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / "digits_ps.yaml").read_text())
    spec["entrypoint"] = ["python", "examples/digits.py", "--epochs", "14"]
    spec["restart"] = {"policy": "on_failure", "max_restarts": 3, "backoff_seconds": 0}
    job = cluster.submit(spec)
    cluster.wait_for(
        job["id"],
        lambda j: any("epoch=3 " in line for line in cluster.logs(j["id"], "chief:0")),
        180,
        "at epoch 3",
    )
    os.kill(pid_of(cluster, job["id"], "worker:1"), signal.SIGKILL)
    done = cluster.wait_status(job["id"], "succeeded", timeout=300)

    attempts = {t["name"]: t["attempt"] for t in done["tasks"]}
    assert attempts == {"chief:0": 0, "worker:0": 0, "worker:1": 1, "ps:0": 0}
    assert done["restart_count"] == 0  # the job itself never restarted
    events = cluster.events(job["id"])
    assert any(e["kind"] == "restart" and e["task"] == "worker:1" for e in events)
    assert not any(e["to_status"] == "restarting" for e in events)
    curve = [
        (int(m[1]), float(m[2]))
        for line in cluster.logs(job["id"], "chief:0")
        if (m := EPOCH_LINE.match(line))
    ]
    assert [epoch for epoch, _ in curve] == list(range(1, 15))
    assert curve[-1][1] < curve[3][1] < curve[0][1]  # still falling after the kill
    cluster.wait_for(
        job["id"],
        lambda j: all(t["status"] in ("succeeded", "stopped") for t in j["tasks"]),
        60,
        "fully stopped",
    )
    wait_no_processes(job["id"], server=cluster.url)


def epoch_curve(cluster: Cluster, job_id: int, attempt: int) -> list[tuple[int, float]]:
    page = cluster.http.get(
        f"/jobs/{job_id}/tasks/chief:0/logs", params={"attempt": attempt, "limit": 10000}
    ).json()
    return [(int(m[1]), float(m[2])) for line in page["lines"] if (m := EPOCH_LINE.match(line))]


def test_a_killed_ps_restarts_with_the_chief_which_resumes_from_its_backup(
    cluster: Cluster,
) -> None:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / "digits_ps.yaml").read_text())
    spec["entrypoint"] = ["python", "examples/digits.py", "--epochs", "10"]
    spec["restart"] = {"policy": "on_failure", "max_restarts": 3, "backoff_seconds": 0}
    # A backup at every epoch end (epochs are short here): the resumed epoch is checkable.
    spec["checkpoint"] |= {"backup_every_seconds": 0}
    job = cluster.submit(spec)
    cluster.wait_for(
        job["id"],
        lambda j: len(epoch_curve(cluster, j["id"], 0)) >= 4,
        240,
        "past epoch 4",
    )
    os.kill(pid_of(cluster, job["id"], "ps:0"), signal.SIGKILL)
    done = cluster.wait_status(job["id"], "succeeded", timeout=300)

    attempts = {t["name"]: t["attempt"] for t in done["tasks"]}
    assert attempts["ps:0"] >= 1 and attempts["chief:0"] >= 1
    assert attempts["worker:0"] == attempts["worker:1"] == 0  # workers were not restarted
    assert done["restart_count"] >= 1
    before = epoch_curve(cluster, job["id"], 0)
    after = epoch_curve(cluster, job["id"], attempts["chief:0"])
    # The epoch counter continues from the backup instead of starting again at 1, and the
    # weights came back with it: the first resumed epoch is far below the first epoch's loss.
    assert after[0][0] > 1, after
    assert after[0][0] <= before[-1][0] + 1, (before, after)
    assert after[-1][0] == 10
    assert after[0][1] < 0.6 * before[0][1], (before, after)
    wait_no_processes(job["id"], server=cluster.url)


def test_a_job_that_keeps_failing_stops_at_max_restarts(cluster: Cluster) -> None:
    spec = python_job(
        "crash-loop",
        "print('trying', flush=True); raise SystemExit(7)",
        restart={"policy": "on_failure", "max_restarts": 2, "backoff_seconds": 0.2},
    )
    job = cluster.submit(spec)
    failed = cluster.wait_status(job["id"], "failed", timeout=120)
    assert failed["reason"] == "chief:0 exited with code 7; gave up after 2 restarts"
    assert failed["restart_count"] == 2
    assert failed["tasks"][0]["attempt"] == 2
    restarting = [e for e in cluster.events(job["id"]) if e["to_status"] == "restarting"]
    assert [e["message"].split("(")[-1] for e in restarting] == [
        "restart 1 of 2)",
        "restart 2 of 2)",
    ]
    for attempt in range(3):
        page = cluster.http.get(
            f"/jobs/{job['id']}/tasks/chief:0/logs", params={"attempt": attempt}
        ).json()
        assert page["lines"] == ["trying"]


def test_restarts_a_user_asked_for_leave_the_budget_to_failures(cluster: Cluster) -> None:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / "digits_mirrored.yaml").read_text())
    spec["entrypoint"] = ["python", "examples/digits.py", "--epochs", "1000"]
    spec["restart"] = {"policy": "on_failure", "max_restarts": 3, "backoff_seconds": 0}
    job = cluster.submit(spec)
    cluster.wait_status(job["id"], "running", timeout=60)

    def running_on(attempt: int) -> Callable[[dict[str, Any]], bool]:
        return lambda j: j["status"] == "running" and j["tasks"][0]["attempt"] == attempt

    for attempt in (1, 2, 3):
        assert cluster.http.post(f"/jobs/{job['id']}/restart").status_code == 200
        cluster.wait_for(job["id"], running_on(attempt), 120, f"running again on {attempt}")
    # Training, not just started: the process the kill ends is TensorFlow's.
    cluster.wait_for(
        job["id"],
        lambda j: any(EPOCH_LINE.match(line) for line in cluster.logs(j["id"], "chief:0")),
        240,
        "an epoch of attempt 3",
    )
    os.kill(pid_of(cluster, job["id"], "chief:0"), signal.SIGKILL)
    again = cluster.wait_for(job["id"], running_on(4), 120, "restarted by its policy on 4")
    assert (again["restart_count"], again["failure_count"]) == (4, 1)
    assert again["tasks"][0]["failure_count"] == 1
    restarting = [e for e in cluster.events(job["id"]) if e["to_status"] == "restarting"]
    assert restarting[-1]["message"].endswith("restarting chief:0 in 0s (restart 1 of 3)")
    cluster.http.post(f"/jobs/{job['id']}/cancel")
    wait_no_processes(job["id"], server=cluster.url)


def test_exit_code_policy_does_not_retry_a_program_error(cluster: Cluster) -> None:
    spec = python_job(
        "no-retry", "raise SystemExit(2)", restart={"policy": "exit_code", "max_restarts": 3}
    )
    job = cluster.submit(spec)
    failed = cluster.wait_status(job["id"], "failed", timeout=60)
    assert failed["restart_count"] == 0 and failed["reason"] == "chief:0 exited with code 2"


def test_a_lost_host_is_re_placed_and_the_job_completes(cluster: Cluster) -> None:
    doomed = cluster.start_agent("doomed-replace", gpus=8, ports="27000-27099")
    cluster.wait_host("doomed-replace", "online")
    code = (
        "import os, time\n"
        "print('attempt', os.environ['STRATA_ATTEMPT'], flush=True)\n"
        "time.sleep(8 if os.environ['STRATA_ATTEMPT'] == '1' else 600)\n"
    )
    spec = python_job("movable", code, replicas={"chief": {"count": 1, "gpus": 2}})
    job = cluster.submit(spec)
    running = cluster.wait_status(job["id"], "running", timeout=60)
    assert running["tasks"][0]["host"] == "doomed-replace"  # the most free GPUs
    doomed.send_signal(signal.SIGKILL)
    cluster.wait_host("doomed-replace", "lost", timeout=20)
    done = cluster.wait_status(job["id"], "succeeded", timeout=120)
    task = done["tasks"][0]
    assert task["attempt"] == 1 and task["host"] in ("local-0", "local-1")
    assert done["restart_count"] == 1
    assert any("re-placing the job" in (e["message"] or "") for e in cluster.events(job["id"]))
    assert cluster.logs(job["id"], "chief:0") == ["attempt 1"]
    wait_no_processes(job["id"], server=cluster.url)


def test_restart_requests_and_their_refusals(cluster: Cluster) -> None:
    spec = {
        "name": "sleepers",
        "strategy": "multi_worker_mirrored",
        "entrypoint": ["python", "-c", "import time; time.sleep(600)"],
        "replicas": {"worker": {"count": 2}},
    }
    job = cluster.submit(spec)
    cluster.wait_status(job["id"], "running", timeout=60)
    before = set(job_processes(job["id"], cluster.url))

    answer = cluster.http.post(f"/jobs/{job['id']}/tasks/worker:0/restart")
    assert answer.status_code == 200
    # Under multi_worker_mirrored one worker's restart takes every worker with it.
    cluster.wait_for(
        job["id"],
        lambda j: j["status"] == "running" and all(t["attempt"] == 1 for t in j["tasks"]),
        60,
        "running again on attempt 1",
    )
    deadline = time.monotonic() + 20
    while set(job_processes(job["id"], cluster.url)) & before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(job_processes(job["id"], cluster.url)) & before  # the old processes are gone

    env = {
        **os.environ,
        "STRATA_SERVER": cluster.url,
        "STRATA_TOKEN": cluster.admin_token,
        "COLUMNS": "200",
    }
    whole = subprocess.run(
        [*STRATA, "jobs", "restart", str(job["id"])],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert whole.returncode == 0, whole.stderr
    assert f"restarting job {job['id']}: pending" in whole.stdout
    cluster.wait_for(
        job["id"],
        lambda j: j["status"] == "running" and all(t["attempt"] == 2 for t in j["tasks"]),
        60,
        "running again on attempt 2",
    )
    assert cluster.job(job["id"])["restart_count"] == 2

    assert cluster.http.post(f"/jobs/{job['id']}/tasks/worker:9/restart").status_code == 404
    cluster.http.post(f"/jobs/{job['id']}/cancel")
    refused = cluster.http.post(f"/jobs/{job['id']}/restart")
    assert refused.status_code == 409
    assert (
        "is cancelled; only a scheduled, running, restarting or failed job"
        in refused.json()["detail"]
    )
    task_refused = cluster.http.post(f"/jobs/{job['id']}/tasks/worker:0/restart")
    assert task_refused.status_code == 409
    wait_no_processes(job["id"], server=cluster.url)
