"""Hung jobs on real processes: found from the runtimes' progress within the hang timeout,
their stacks written into the logs, and training again from the checkpoint; and jobs that are
only slow to trace, evaluate or checkpoint, never flagged."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cluster import Cluster, local_cluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "tests/e2e/health_script.py"
HANG_TIMEOUT = 20
DETECTION_SLACK = 10  # seconds past the timeout within which a hang must be declared


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("hangs") / "data") as running:
        yield running


def hang_events(cluster: Cluster, job_id: int) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.events(job_id)
        if e["kind"] == "health" and e["data"].get("finding") == "hung"
    ]


def wait_training(cluster: Cluster, job_id: int, past_step: int, timeout: float) -> dict[str, Any]:
    return cluster.wait_for(
        job_id,
        lambda j: (
            j["status"] == "running"
            and j["progress"] is not None
            and j["progress"]["step"] > past_step
            and j["progress"]["busy"] is None
        ),
        timeout,
        f"training past step {past_step}",
    )


def task_logs(cluster: Cluster, job_id: int, task: str, attempt: int) -> list[str]:
    page = cluster.http.get(
        f"/jobs/{job_id}/tasks/{task}/logs", params={"limit": 10000, "attempt": attempt}
    ).json()
    lines: list[str] = page["lines"]
    return lines


def declared_within(event: dict[str, Any], since: float) -> float:
    return datetime.fromisoformat(event["at"]).timestamp() - since


def test_an_mwm_worker_blocked_in_its_input_pipeline_is_found_hung_and_restarted(
    cluster: Cluster, tmp_path: Path
) -> None:
    block = tmp_path / "block"
    job = cluster.submit(
        {
            "name": "mwm-blocked-read",
            "strategy": "multi_worker_mirrored",
            "entrypoint": ["python", SCRIPT, "--epochs", "400", "--block-file", str(block)],
            "replicas": {"worker": {"count": 2}},
            "hang_timeout": HANG_TIMEOUT,
            "checkpoint": {"every_epochs": 1, "backup_every_seconds": 0},
            "restart": {"policy": "on_failure", "max_restarts": 2, "backoff_seconds": 0},
        }
    )
    running = wait_training(cluster, job["id"], 300, 180)
    assert running["progress"]["total_steps"] == 400 * 50
    assert running["progress"]["steps_per_second"] > 0

    block.touch()
    blocked_at = time.time()
    found = cluster.wait_for(
        job["id"],
        lambda j: bool(hang_events(cluster, j["id"])),
        HANG_TIMEOUT + DETECTION_SLACK + 15,
        "found hung",
    )
    block.unlink()  # the next attempts read on
    event = hang_events(cluster, found["id"])[0]
    assert declared_within(event, blocked_at) <= HANG_TIMEOUT + DETECTION_SLACK
    assert event["data"]["timeout_seconds"] == HANG_TIMEOUT
    assert event["message"].startswith("hung: no step for ")
    hung_step = event["data"]["step"]

    # The restart: every worker, from the checkpoint, training again within two minutes.
    resumed_at: list[int] = []

    def training_again(j: dict[str, Any]) -> bool:
        if not all(t["attempt"] == 1 for t in j["tasks"]) or j["progress"] is None:
            return False
        resumed_at.append(j["progress"]["step"])
        return bool(j["progress"]["step"] > hung_step)

    again = cluster.wait_for(job["id"], training_again, 120, "training again past its hang")
    assert min(resumed_at) >= hung_step - 100  # from the last epoch's backup, not from 0
    assert again["failure_count"] == 1
    assert any(
        e["to_status"] == "restarting" and e["message"].startswith("hung: no step for")
        for e in cluster.events(job["id"])
    )
    # The stacks, in the logs of the attempt that hung: its thread blocked in the read.
    blocked = task_logs(cluster, job["id"], "worker:1", 0)
    assert any("threads of worker:1 attempt 0" in line for line in blocked)
    assert any("in read_record" in line for line in blocked), blocked[-60:]
    assert any("in fit" in line for line in task_logs(cluster, job["id"], "worker:0", 0))
    cluster.http.post(f"/jobs/{job['id']}/cancel")


def test_a_ps_job_whose_ps_is_stopped_is_found_hung_and_restarted(cluster: Cluster) -> None:
    spec: dict[str, Any] = yaml.safe_load((REPO / "examples" / "digits_ps.yaml").read_text())
    spec.update(
        name="ps-stopped",
        # Long epochs: the stop lands inside one, not in an epoch end's checkpoint (a busy
        # phase, which is given five timeouts).
        entrypoint=["python", "examples/digits.py", "--epochs", "50", "--steps-per-epoch", "2000"],
        hang_timeout=HANG_TIMEOUT,
        restart={"policy": "on_failure", "max_restarts": 2, "backoff_seconds": 0},
        export=None,
    )
    spec["replicas"]["worker"]["count"] = 1
    job = cluster.submit(spec)
    running = wait_training(cluster, job["id"], 60, 180)
    ps = next(t for t in running["tasks"] if t["name"] == "ps:0")
    os.kill(ps["pid"], signal.SIGSTOP)
    stopped_at = time.time()
    found = cluster.wait_for(
        job["id"],
        lambda j: bool(hang_events(cluster, j["id"])),
        HANG_TIMEOUT + DETECTION_SLACK + 15,
        "found hung",
    )
    event = hang_events(cluster, found["id"])[0]
    assert declared_within(event, stopped_at) <= HANG_TIMEOUT + DETECTION_SLACK
    again = cluster.wait_for(
        job["id"],
        lambda j: (
            j["status"] == "running"
            and next(t for t in j["tasks"] if t["name"] == "ps:0")["attempt"] == 1
            and j["progress"] is not None
            and j["progress"]["step"] > event["data"]["step"]
        ),
        120,
        "training again with a new ps",
    )
    assert again["failure_count"] == 1
    ps_lines = task_logs(cluster, job["id"], "ps:0", 0)
    assert any("threads of ps:0 attempt 0" in line for line in ps_lines)
    assert any(": stopped" in line for line in ps_lines), ps_lines[-40:]
    chief_lines = task_logs(cluster, job["id"], "chief:0", 0)
    assert any("threads of chief:0 attempt 0" in line for line in chief_lines)
    cluster.http.post(f"/jobs/{job['id']}/cancel")


def test_a_slow_trace_a_long_evaluation_and_large_checkpoints_are_no_hang(
    cluster: Cluster,
) -> None:
    job = cluster.submit(
        {
            "name": "slow-not-hung",
            "strategy": "mirrored",
            "entrypoint": [
                "python",
                SCRIPT,
                *("--epochs", "2", "--steps-per-epoch", "20"),
                *("--trace-seconds", "40", "--eval-seconds", "15", "--ballast-mb", "512"),
            ],
            "replicas": {"chief": {"count": 1}},
            "hang_timeout": 10,
            "checkpoint": {"every_epochs": 1, "backup_every_seconds": 0},
            "restart": {"policy": "on_failure", "max_restarts": 2, "backoff_seconds": 0},
        }
    )
    busy_seen: set[str] = set()

    def note_busy(j: dict[str, Any]) -> bool:
        if j["progress"] is not None and j["progress"]["busy"]:
            busy_seen.add(j["progress"]["busy"])
        return j["status"] in ("succeeded", "failed", "cancelled")

    done = cluster.wait_for(job["id"], note_busy, 400, "finished")
    assert done["status"] == "succeeded", done["reason"]
    flagged = [
        (e["message"], e["data"]) for e in cluster.events(job["id"]) if e["kind"] == "health"
    ]
    assert not flagged
    assert done["restart_count"] == 0
    assert {"tracing", "evaluating"} <= busy_seen
